"""The config name of each data transformer."""

from __future__ import annotations

from typing import Literal

from cadence.transforms.frame_stacker import FrameStacker
from cadence.transforms.hindsight import HindsightExperienceTransformer
from cadence.transforms.image_scale import ImageScaleTransformer
from cadence.transforms.observation_normalizer import ObservationNormalizer
from cadence.transforms.reward import RewardClipping, RewardScaling
from cadence.transforms.reward_normalizer import RewardNormalizer
from cadence.transforms.transformer import DataTransformer
from cadence.transforms.untransformed import UntransformedTimeStep

TransformerName = Literal[
    "untransformed_time_step",
    "hindsight_experience",
    "frame_stacker",
    "observation_normalizer",
    "reward_clipping",
    "reward_normalizer",
    "reward_scaling",
    "image_scale",
]

TRANSFORMER_CLASSES: dict[str, type[DataTransformer]] = {
    "untransformed_time_step": UntransformedTimeStep,
    "hindsight_experience": HindsightExperienceTransformer,
    "frame_stacker": FrameStacker,
    "observation_normalizer": ObservationNormalizer,
    "reward_clipping": RewardClipping,
    "reward_normalizer": RewardNormalizer,
    "reward_scaling": RewardScaling,
    "image_scale": ImageScaleTransformer,
}
"""The transformer class of each name a config may list."""
