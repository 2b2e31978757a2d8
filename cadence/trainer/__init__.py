"""The trainer: the training loop, evaluation, metrics, checkpoints, pre-emption, snapshot, play."""

from cadence.trainer.checkpoint import CheckpointManager
from cadence.trainer.config import TrainerConfig
from cadence.trainer.metrics import read_metrics
from cadence.trainer.trainer import Trainer

__all__ = ["CheckpointManager", "Trainer", "TrainerConfig", "read_metrics"]
