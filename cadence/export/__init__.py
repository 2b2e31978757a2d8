"""Export: a run's deterministic policy as one ONNX or TorchScript file (``cadence export``)."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ExportError": "errors",
        "ExportResult": "run",
        "LoadedPolicy": "run",
        "PolicyGraph": "graph",
        "export_run": "run",
        "load_policy_graph": "run",
    },
)

__all__ = [
    "ExportError",
    "ExportResult",
    "LoadedPolicy",
    "PolicyGraph",
    "export_run",
    "load_policy_graph",
]
