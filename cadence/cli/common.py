"""What the commands share: argument types, the ``--checkpoint`` option, terminal logging."""

from __future__ import annotations

import argparse
import logging


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_checkpoint_option(command: argparse.ArgumentParser) -> None:
    """Adds ``--checkpoint latest|best|N`` to a command that opens a run's checkpoint."""
    command.add_argument(
        "--checkpoint",
        type=checkpoint_choice,
        default="latest",
        metavar="latest|best|N",
        help="which checkpoint acts: the latest (default), the best (highest evaluation "
        "return among checkpoints saved at an evaluated iteration; pruning keeps it), or "
        "that of iteration N",
    )


def checkpoint_choice(text: str) -> str:
    """An argparse type: ``latest``, ``best`` or an iteration number."""
    if text in ("latest", "best") or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"must be 'latest', 'best' or an iteration, got {text!r}")


def checkpoint_kwargs(args: argparse.Namespace) -> dict[str, str]:
    """The ``checkpoint`` keyword for play and eval, passed only when asked for, so that
    the code of an older ``--use-snapshot`` still runs."""
    return {} if args.checkpoint == "latest" else {"checkpoint": args.checkpoint}


def log_to_terminal() -> None:
    """cadence's own INFO lines (what it loaded, chose and wrote) and every library's
    warnings; other libraries' INFO chatter (PyOpenGL's, when MuJoCo renders) stays out."""
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    logging.getLogger("cadence").setLevel(logging.INFO)
