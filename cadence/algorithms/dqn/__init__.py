"""DQN (Mnih et al. 2015) with double Q, n-step targets and prioritized replay: `DQNAlgorithm`, `DQNConfig`, `DQNLoss`, `bootstrap_value`, `linear_epsilon`, `make_dqn`, `n_step_targets`.

Names load on first use (`cadence._lazy`): reading ``dqn.config`` imports no torch.
"""

from cadence._lazy import lazy_exports

__all__ = [
    "DQNAlgorithm",
    "DQNConfig",
    "DQNLoss",
    "bootstrap_value",
    "linear_epsilon",
    "make_dqn",
    "n_step_targets",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DQNAlgorithm": "algorithm",
        "DQNConfig": "config",
        "DQNLoss": "loss",
        "bootstrap_value": "loss",
        "linear_epsilon": "algorithm",
        "make_dqn": "build",
        "n_step_targets": "loss",
    },
)
