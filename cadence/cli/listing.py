"""``cadence list``: the named configs, each with its one-line description."""

from __future__ import annotations

import argparse
from typing import Any

from cadence.config import list_configs


def add_command(commands: Any) -> None:
    """Adds ``list`` to the sub-commands ``commands``."""
    command = commands.add_parser("list", help="list the named configs", allow_abbrev=False)
    command.set_defaults(run=run_list)


def run_list(args: argparse.Namespace) -> int:
    """Prints each named config with its one-line description."""
    configs = list_configs()
    width = max(map(len, configs), default=0)
    for name, description in configs.items():
        print(f"{name:<{width}}  {description}")
    return 0
