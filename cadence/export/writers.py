"""Writing a `PolicyGraph` as an ONNX or a TorchScript file, each one self-contained.

ONNX goes through torch's dynamo-based exporter (``torch.onnx.export(..., dynamo=True)``,
which needs ``onnxscript``), the weights stored inside the file rather than beside it;
TorchScript through ``torch.jit.trace``. Both keep the batch dimension dynamic.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import torch

from cadence.export.errors import ExportError, require_onnx_exporter
from cadence.export.graph import PolicyGraph

ExportFormat = Literal["onnx", "torchscript"]
"""The file formats `cadence export` writes."""

ONNX_OPSET = 18
"""The ONNX opset of exported files (onnxruntime 1.17 and later run it)."""


def write_onnx(graph: PolicyGraph, path: Path, input_names: list[str], output_names: list[str]):
    """Writes ``graph`` to ``path`` as one ONNX file with a dynamic batch dimension.

    The batch dimension is named ``batch`` in the file's inputs and outputs.

    Raises:
        MissingExportDependencyError: onnx or onnxscript is missing.
    """
    require_onnx_exporter()
    example = graph.example_inputs(3)  # not 1 or 2: the exporter would take them as constants
    batch = torch.export.Dim("batch", min=1)
    dynamic_shapes = (tuple({0: batch} for _ in example),)  # forward takes *inputs
    with (
        torch.no_grad(),
        warnings.catch_warnings(),
        _quiet(*_EXPORTER_LOGGERS),
    ):
        warnings.simplefilter("ignore")  # the exporter's notes about its own internals
        # torch.export first: it fails loudly where the batch cannot stay dynamic, where
        # torch.onnx.export would fall back to a file of fixed batch size.
        program = torch.export.export(graph, example, dynamic_shapes=dynamic_shapes, strict=False)
        onnx_program = torch.onnx.export(
            program,
            example,
            dynamo=True,
            input_names=input_names,
            output_names=output_names,
            opset_version=ONNX_OPSET,
            external_data=False,
            verbose=False,
        )
    import onnx  # installed: checked above

    model = onnx_program.model_proto  # a fresh proto, renamed before it is written
    _name_batch_dim(model.graph)
    onnx.save_model(model, str(path), save_as_external_data=False)


def _name_batch_dim(graph: Any) -> None:
    """Renames the exporter's symbol for the batch (``s21``) to ``batch``.

    Raises:
        ExportError: the first input's batch is not dynamic (the exporter fixed it).
    """
    symbol = graph.input[0].type.tensor_type.shape.dim[0].dim_param
    if not symbol:
        raise ExportError("the ONNX exporter fixed the batch size; please report this run")
    for value in [*graph.input, *graph.output, *graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param == symbol:
                dim.dim_param = "batch"


_EXPORTER_LOGGERS = ("torch.onnx", "onnxscript", "onnx_ir")
"""The exporter's loggers: a warning for each optional operator library not installed,
and a line per optimisation pass."""


@contextlib.contextmanager
def _quiet(*names: str) -> Iterator[None]:
    """Raises the loggers ``names`` to ERROR for the duration."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def write_torchscript(graph: PolicyGraph, path: Path) -> None:
    """Writes ``graph`` to ``path`` as a traced TorchScript module (``torch.jit.load``)."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # torch.jit warns that it is deprecated in favour of torch.export, whose programs
        # need Python to load; TorchScript is what torch.jit.load and LibTorch (C++) run.
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(graph, graph.example_inputs(3), check_trace=False)
        torch.jit.save(traced, str(path))
