"""The trainer: the training loop, evaluation, metrics, checkpoints, pre-emption, snapshot, play."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CheckpointManager": "checkpoint",
        "TrainerConfig": "config",
        "read_metrics": "metrics",
        "Trainer": "trainer",
    },
)

__all__ = ["CheckpointManager", "Trainer", "TrainerConfig", "read_metrics"]
