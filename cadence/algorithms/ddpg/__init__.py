"""DDPG (Lillicrap et al. 2016, https://arxiv.org/abs/1509.02971): `DDPGConfig`, `make_ddpg`.

Names load on first use (`cadence._lazy`): reading ``ddpg.config`` imports no torch.
"""

from cadence._lazy import lazy_exports

__all__ = [
    "DDPGConfig",
    "make_ddpg",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DDPGConfig": "config",
        "make_ddpg": "build",
    },
)
