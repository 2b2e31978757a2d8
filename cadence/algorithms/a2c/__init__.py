"""A2C (Mnih et al. 2016, https://arxiv.org/abs/1602.01783): `A2CConfig`, `A2CLoss`, `make_a2c`.

Names load on first use (`cadence._lazy`): reading ``a2c.config`` imports no torch.
"""

from cadence._lazy import lazy_exports

__all__ = [
    "A2CConfig",
    "A2CLoss",
    "make_a2c",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "A2CConfig": "config",
        "A2CLoss": "loss",
        "make_a2c": "build",
    },
)
