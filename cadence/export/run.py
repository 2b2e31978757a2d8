"""`export_run`: a run's deterministic policy as one ONNX or TorchScript file and a sidecar.

The file maps what the env gives to what the env receives: it holds the run's observation
normalisation and image scaling (data transformers, with the checkpoint's statistics)
and the action rescaling of its policy (clipping to the bounds, tanh squashing, a
deterministic actor's ``[-1, 1]`` to the bounds) and the env's action wrappers that fold
(`cadence.export.action_wrappers`), so nothing of cadence is needed to act.
The sidecar JSON beside it names the inputs and outputs in order with their shapes and
dtypes, the action space's bounds and the initial state of a policy with state.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cadence.algorithms.registry import algorithm_capabilities
from cadence.data.nest import flatten_with_paths
from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec, Spec
from cadence.export.action_wrappers import FoldedActionWrappers, fold_action_wrappers
from cadence.export.errors import require_onnx_exporter
from cadence.export.graph import PolicyGraph
from cadence.export.writers import ONNX_OPSET, ExportFormat, write_onnx, write_torchscript
from cadence.trainer.play import load_policy_checkpoint, make_policy_env
from cadence.trainer.run import check_training_env

logger = logging.getLogger(__name__)

DEFAULT_FILES: dict[str, str] = {"onnx": "policy.onnx", "torchscript": "policy.pt"}
"""The file under ``<run>/export/`` that each format writes when no ``out`` is given."""


@dataclasses.dataclass(frozen=True)
class LoadedPolicy:
    """A run's policy ready to export.

    Attributes:
        graph: the policy as flat named tensors.
        wrappers: the env's action wrappers, which of them the graph folds in.
        checkpoint: the checkpoint directory it was loaded from.
    """

    graph: PolicyGraph
    wrappers: FoldedActionWrappers
    checkpoint: Path


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """Where `export_run` wrote: the policy file and its sidecar JSON."""

    path: Path
    sidecar: Path


def export_run(
    config: Any,
    run_dir: Path,
    format: ExportFormat,
    out: Path | None = None,
    checkpoint: str = "latest",
) -> ExportResult:
    """Writes the deterministic policy of a run's checkpoint as one self-contained file.

    Args:
        config: the run's config (its ``config.yaml``).
        run_dir: the run directory.
        format: ``"onnx"`` (run it with onnxruntime) or ``"torchscript"`` (``torch.jit.load``).
        out: the file to write; default ``<run_dir>/export/policy.onnx`` or ``policy.pt``.
            The sidecar goes beside it, named ``FILE.json`` (``policy.onnx.json``), so
            that an ONNX and a TorchScript file side by side each keep theirs.
        checkpoint: ``"latest"``, ``"best"`` or an iteration number.

    Returns:
        The paths written.

    Raises:
        MissingExportDependencyError: ``"onnx"`` without the export extra installed.
        FileNotFoundError: the run has no checkpoint.
        EnvBuildError: the run's environment cannot be built here (its specs are needed).
        ExportError: the policy cannot be exported (the message says why).
        ValueError: an unknown ``format``.
    """
    if format not in DEFAULT_FILES:
        raise ValueError(f"format must be one of {sorted(DEFAULT_FILES)}, got {format!r}")
    if format == "onnx":
        require_onnx_exporter()  # before any work
    path = Path(out) if out is not None else Path(run_dir) / "export" / DEFAULT_FILES[format]
    policy = load_policy_graph(config, run_dir, checkpoint)
    graph = policy.graph
    inputs, outputs = graph.input_infos(), graph.output_infos()
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")  # a reader never sees half a file
    try:
        if format == "onnx":
            write_onnx(graph, staging, [i.name for i in inputs], [o.name for o in outputs])
        else:
            write_torchscript(graph, staging)
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    sidecar = path.with_name(f"{path.name}.json")
    description = describe(policy, config, format, path.name, checkpoint)
    sidecar.write_text(json.dumps(description, indent=2) + "\n")
    logger.info("wrote %s and %s", path, sidecar)
    return ExportResult(path, sidecar)


def load_policy_graph(config: Any, run_dir: Path, checkpoint: str = "latest") -> LoadedPolicy:
    """The `PolicyGraph` of a run's checkpoint (the env is built for its specs only), the
    env's action wrappers it folds in, and the checkpoint.

    A policy whose registration declares ``previous_action`` (the model-based ones) folds
    none: its ``prev_action`` input is the action the policy gave, so its output must stay
    in the same units.

    Raises:
        EnvBuildError: the run's environment cannot be built here.
    """
    check_training_env(config)
    env = make_policy_env(config, 1)
    try:
        path, algorithm, transformer = load_policy_checkpoint(config, run_dir, env, checkpoint)
        observation_spec, action_spec = env.observation_spec, env.action_spec
    finally:
        env.close()
    uses_prev_action = algorithm_capabilities(config.algorithm.name).previous_action
    wrappers = fold_action_wrappers(config)
    if uses_prev_action and wrappers.folded:
        wrappers = FoldedActionWrappers(None, None, (), (*wrappers.folded, *wrappers.outside))
    graph = PolicyGraph(
        algorithm, transformer, observation_spec, action_spec, uses_prev_action, wrappers.action_map
    )
    return LoadedPolicy(graph, wrappers, path)


def describe(
    policy: LoadedPolicy,
    config: Any,
    format: ExportFormat,
    file_name: str,
    checkpoint: str,
) -> dict[str, Any]:
    """The sidecar's content: what the file takes and returns, and what it came from."""
    graph, wrappers = policy.graph, policy.wrappers
    description: dict[str, Any] = {
        "file": file_name,
        "format": format,
        "run": {
            "name": config.name,
            "algorithm": config.algorithm.name,
            "env": config.env.name,
            "env_wrappers": list(config.env.all_wrappers),
            "action_wrappers_in_file": list(wrappers.folded),
            "action_wrappers_outside": list(wrappers.outside),
            "checkpoint": str(checkpoint),
            "checkpoint_loaded": policy.checkpoint.name,
            "data_transformers": list(config.data_transformers.names),
        },
        "inputs": [info.as_json() for info in graph.input_infos()],
        "outputs": [info.as_json() for info in graph.output_infos()],
        "observation_space": _spec_json(graph.observation_spec),
        "action_space": _spec_json(graph.action_spec)
        if wrappers.action_space is None
        else _box_json(wrappers.action_space),
        # The algorithm's state alone: a transformer's (a frame history) starts from zeros.
        "initial_state": {
            name: value[0].tolist() for name, value in graph.policy_initial_state().items()
        },
        "torch_version": torch.__version__,
    }
    if format == "onnx":
        description["onnx_opset"] = ONNX_OPSET
    return description


def _spec_json(spec: Spec) -> Any:
    """A spec as JSON: a dict by leaf path for a Dict, else one leaf's description."""
    leaves = list(flatten_with_paths(spec))
    if len(leaves) == 1 and leaves[0][0] == "":
        return _leaf_json(leaves[0][1])
    return {path: _leaf_json(leaf) for path, leaf in leaves}


def _leaf_json(spec: Any) -> dict[str, Any]:
    dtype = str(spec.dtype).removeprefix("torch.")
    description: dict[str, Any] = {"shape": list(spec.shape), "dtype": dtype}
    if isinstance(spec, DiscreteTensorSpec):
        description["num_values"] = np.asarray(spec.nvec).tolist()
    elif isinstance(spec, BoundedTensorSpec):
        shape = tuple(spec.shape)
        for name in ("minimum", "maximum"):
            bound = np.broadcast_to(np.asarray(getattr(spec, name), np.float64), shape)
            description[name] = _finite_or_none(bound.tolist())
    return description


def _box_json(space: Any) -> dict[str, Any]:
    """A Gymnasium ``Box`` as `_leaf_json` describes a bounded spec."""
    return {
        "shape": list(space.shape),
        "dtype": str(space.dtype),
        "minimum": _finite_or_none(space.low.astype(np.float64).tolist()),
        "maximum": _finite_or_none(space.high.astype(np.float64).tolist()),
    }


def _finite_or_none(values: Any) -> Any:
    """Nested lists of floats with infinities as None (JSON has no infinity): unbounded."""
    if isinstance(values, list):
        return [_finite_or_none(value) for value in values]
    return values if np.isfinite(values) else None
