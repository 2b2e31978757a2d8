"""``cadence export``: writes a run's policy as one ONNX or TorchScript file and its sidecar."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cadence.cli.common import add_checkpoint_option, log_to_terminal
from cadence.cli.run_dir import load_run


def add_command(commands: Any) -> None:
    """Adds ``export`` to the sub-commands ``commands``."""
    command = commands.add_parser(
        "export",
        help="write a trained policy as an ONNX or TorchScript file",
        allow_abbrev=False,
        description="Write the deterministic policy of a run's checkpoint (observation to "
        "action, with the run's observation normalisation and action rescaling) as one "
        "self-contained file, and a JSON sidecar beside it naming its inputs and outputs. "
        "ONNX needs `pip install 'cadence[export]'`. See docs/export.md.",
    )
    command.add_argument("run_dir", metavar="DIR", type=Path, help="a run directory")
    command.add_argument(
        "--format", choices=["onnx", "torchscript"], required=True, help="the file format"
    )
    command.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="the file to write (default DIR/export/policy.onnx or policy.pt); the sidecar "
        "is FILE.json",
    )
    add_checkpoint_option(command)
    command.set_defaults(run=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Exports a run's checkpoint (``--checkpoint``) and prints the files written."""
    if args.format == "onnx":
        from cadence.export.errors import require_onnx_exporter

        require_onnx_exporter()  # before torch and the run are loaded
    config, export_module = load_run(args.run_dir, "cadence.export.run", args.checkpoint)
    log_to_terminal()  # which checkpoint was loaded, where the files went
    result = export_module.export_run(
        config, args.run_dir, args.format, args.out, checkpoint=args.checkpoint
    )
    print(f"wrote {result.path}")
    print(f"wrote {result.sidecar}")
    return 0
