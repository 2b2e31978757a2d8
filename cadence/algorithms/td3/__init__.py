"""TD3 (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477): `TD3Config`, `TargetPolicySmoothing`, `make_td3`.

Names load on first use (`cadence._lazy`): reading ``td3.config`` imports no torch.
"""

from cadence._lazy import lazy_exports

__all__ = [
    "TD3Config",
    "TargetPolicySmoothing",
    "make_td3",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "TD3Config": "config",
        "TargetPolicySmoothing": "smoothing",
        "make_td3": "build",
    },
)
