"""Why an export failed: errors the ``cadence`` command reports without a traceback.

Torch-free, so the command can catch them (and check the ONNX packages) before it
imports the exporter.
"""

from __future__ import annotations

import importlib.util

EXPORT_EXTRA_HINT = "pip install 'cadence[export]'"
ONNX_PACKAGES = ("onnx", "onnxscript")
"""What ``torch.onnx.export``'s dynamo-based exporter needs besides torch."""


class ExportError(ValueError):
    """The policy cannot be exported as asked; the message says why and what to do."""


class MissingExportDependencyError(ExportError):
    """A package the format needs is not installed; the message says how to install it."""


def require_onnx_exporter() -> None:
    """Checks that the ONNX exporter's packages are installed.

    Raises:
        MissingExportDependencyError: naming the missing packages and the extra to install.
    """
    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExportDependencyError(
            f"--format onnx needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: {EXPORT_EXTRA_HINT}"
        )
