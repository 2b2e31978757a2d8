"""PPO (Schulman et al. 2017, https://arxiv.org/abs/1707.06347): `PPOConfig`, `PPOLoss`, `make_ppo`.

Names load on first use (`cadence._lazy`): reading ``ppo.config`` imports no torch.
"""

from cadence._lazy import lazy_exports

__all__ = [
    "PPOConfig",
    "PPOLoss",
    "make_ppo",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "PPOConfig": "config",
        "PPOLoss": "loss",
        "make_ppo": "build",
    },
)
