"""SAC (Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290): `SACAlgorithm`, `SACConfig`, `default_target_entropy`, `make_sac`.

Names load on first use (`cadence._lazy`): reading ``sac.config`` imports no torch.
"""

from cadence._lazy import lazy_exports

__all__ = [
    "SACAlgorithm",
    "SACConfig",
    "default_target_entropy",
    "make_sac",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SACAlgorithm": "algorithm",
        "SACConfig": "config",
        "default_target_entropy": "build",
        "make_sac": "build",
    },
)
