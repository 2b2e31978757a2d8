"""One rank of a local group: ``python -m cadence.cli.rank RUN_DIR OUTCOME_FILE``.

`cadence.trainer.launch.launch_ranks` starts one such process per rank, with torchrun's
environment; each trains its rank of the run in ``RUN_DIR`` from the ``config.yaml`` that
the starting process wrote, and rank 0 writes how training ended to ``OUTCOME_FILE``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def run_rank(run_dir: str, outcome_file: str) -> int:
    """One rank: trains the run in ``run_dir`` from its ``config.yaml``; the exit code."""
    import attrs

    from cadence.config import ConfigError, from_yaml
    from cadence.envs.errors import EnvBuildError
    from cadence.trainer.errors import (
        CheckpointError,
        NonFiniteUpdateError,
        RunConfigMismatchError,
        RunStorageError,
    )
    from cadence.trainer.run import train

    rank = int(os.environ["RANK"])
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s [rank {rank}] %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    logging.getLogger("cadence").setLevel(logging.INFO if rank == 0 else logging.WARNING)
    path = Path(run_dir) / "config.yaml"
    try:
        config = attrs.evolve(from_yaml(path.read_text(), source=f"'{path}'"), root_dir=run_dir)
        outcome = train(config)
    except (ConfigError, CheckpointError, RunConfigMismatchError, EnvBuildError) as error:
        print(f"cadence train (rank {rank}): {error}", file=sys.stderr)
        return 2
    except (FileNotFoundError, NonFiniteUpdateError, RunStorageError) as error:
        print(f"cadence train (rank {rank}): {error}", file=sys.stderr)
        return 1
    if rank == 0:
        Path(outcome_file).write_text(f"{outcome}\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_rank(*sys.argv[1:3]))
