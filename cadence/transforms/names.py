"""The config name of each data transformer: its order group, and (on first use) its class.

Importing this module imports no transformer (nor torch): `DataTransformersConfig` checks
the names a config lists and their order from `TRANSFORMER_ORDER_GROUPS`, so a config can be
loaded, checked and described (``cadence train NAME --help``) without torch.
`TRANSFORMER_CLASSES` imports the transformer modules the first time it is read.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Literal

from cadence.transforms.order import OrderGroup

if TYPE_CHECKING:
    from cadence.transforms.transformer import DataTransformer

TransformerName = Literal[
    "untransformed_time_step",
    "hindsight_experience",
    "replay_frame_stack",
    "observation_normalizer",
    "reward_clipping",
    "reward_normalizer",
    "reward_scaling",
    "image_scale",
]

TRANSFORMER_ORDER_GROUPS: dict[str, OrderGroup] = {
    "untransformed_time_step": OrderGroup.UNTRANSFORMED,
    "hindsight_experience": OrderGroup.REPLAY_READER,
    "replay_frame_stack": OrderGroup.REPLAY_READER,
    "observation_normalizer": OrderGroup.OTHER,
    "reward_clipping": OrderGroup.OTHER,
    "reward_normalizer": OrderGroup.OTHER,
    "reward_scaling": OrderGroup.OTHER,
    "image_scale": OrderGroup.OTHER,
}
"""The `order_group` of each name's class (a test checks that they agree), by name."""

_CLASS_PATHS: dict[str, str] = {
    "untransformed_time_step": "cadence.transforms.untransformed:UntransformedTimeStep",
    "hindsight_experience": "cadence.transforms.hindsight:HindsightExperienceTransformer",
    "replay_frame_stack": "cadence.transforms.replay_frame_stack:ReplayFrameStack",
    "observation_normalizer": "cadence.transforms.observation_normalizer:ObservationNormalizer",
    "reward_clipping": "cadence.transforms.reward:RewardClipping",
    "reward_normalizer": "cadence.transforms.reward_normalizer:RewardNormalizer",
    "reward_scaling": "cadence.transforms.reward:RewardScaling",
    "image_scale": "cadence.transforms.image_scale:ImageScaleTransformer",
}

TRANSFORMER_CLASSES: dict[str, type[DataTransformer]]
"""The transformer class of each name a config may list (imported when first read)."""


def __getattr__(name: str) -> Any:
    if name != "TRANSFORMER_CLASSES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    classes = {}
    for transformer, path in _CLASS_PATHS.items():
        module, _, class_name = path.partition(":")
        classes[transformer] = getattr(importlib.import_module(module), class_name)
    globals()["TRANSFORMER_CLASSES"] = classes  # later reads find it without this function
    return classes
