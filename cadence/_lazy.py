"""`lazy_exports`: a package's public names, imported on first use (PEP 562).

``cadence list``, ``cadence --version`` and ``cadence train NAME --help`` must answer
without importing torch. Every package ``__init__`` on their import path therefore names
its exports here instead of importing them: ``import cadence.algorithms`` costs nothing,
and ``cadence.algorithms.Algorithm`` imports its module the first time it is read.

>>> __getattr__, __dir__ = lazy_exports("cadence.data", {"StepType": "time_step"})
>>> __getattr__("StepType").LAST
2
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package: the package's ``__name__``.
        exports: each public name and the module that defines it, relative to ``package``
            (``"time_step"`` for ``package.time_step``), or absolute (``"cadence.data.nest"``)
            for a name that a lower layer defines.

    Returns:
        ``(__getattr__, __dir__)`` to assign at the package's top level.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        absolute = module.startswith("cadence.")
        return getattr(importlib.import_module(module if absolute else f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted({*exports, *vars(sys.modules[package])})

    return __getattr__, __dir__
