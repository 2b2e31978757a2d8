"""Data transformers (DESIGN §6): maps of rollout time steps and replayed minibatches."""

from cadence.transforms.build import make_data_transformer
from cadence.transforms.config import DataTransformersConfig
from cadence.transforms.frame_stacker import FrameStacker
from cadence.transforms.hindsight import HindsightExperienceTransformer, sparse_goal_reward
from cadence.transforms.image_scale import ImageScaleTransformer
from cadence.transforms.observation_normalizer import ObservationNormalizer
from cadence.transforms.reward import RewardClipping, RewardScaling
from cadence.transforms.reward_normalizer import RewardNormalizer
from cadence.transforms.running_stats import RunningMeanStd
from cadence.transforms.sequence import (
    DataTransformerSequence,
    TransformerOrderError,
    check_order,
)
from cadence.transforms.transformer import DataTransformer, OrderGroup
from cadence.transforms.untransformed import UntransformedTimeStep

__all__ = [
    "DataTransformer",
    "DataTransformerSequence",
    "DataTransformersConfig",
    "FrameStacker",
    "HindsightExperienceTransformer",
    "ImageScaleTransformer",
    "ObservationNormalizer",
    "OrderGroup",
    "RewardClipping",
    "RewardNormalizer",
    "RewardScaling",
    "RunningMeanStd",
    "TransformerOrderError",
    "UntransformedTimeStep",
    "check_order",
    "make_data_transformer",
    "sparse_goal_reward",
]
