"""``python -m cadence.cli ...``: the ``cadence`` command, as ``python -m cadence`` runs it."""

import sys

from cadence.cli import main

if __name__ == "__main__":
    sys.exit(main())
