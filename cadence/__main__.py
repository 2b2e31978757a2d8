"""``python -m cadence ...``: the ``cadence`` command (so ``torchrun -m cadence train ...`` works)."""

import sys

from cadence.cli import main

if __name__ == "__main__":
    sys.exit(main())
