"""Optuna, the sweep's one optional dependency: imported on use, with how to install it."""

from __future__ import annotations

from typing import Any

from cadence.config import ConfigError

INSTALL_HINT = "pip install 'cadence[sweep]'"


def require_optuna() -> Any:
    """The ``optuna`` module; a `ConfigError` saying how to install it when it is missing."""
    try:
        import optuna
    except ImportError:
        raise ConfigError(f"cadence sweep needs Optuna: {INSTALL_HINT}") from None
    return optuna
