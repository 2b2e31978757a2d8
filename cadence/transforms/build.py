"""`make_data_transformer`: the transformer sequence an experiment config lists."""

from __future__ import annotations

from collections.abc import Callable

from cadence.data.specs import Spec
from cadence.replay.buffer import ReplayBuffer
from cadence.transforms.config import DataTransformersConfig
from cadence.transforms.hindsight import HindsightExperienceTransformer
from cadence.transforms.image_scale import ImageScaleTransformer
from cadence.transforms.observation_normalizer import ObservationNormalizer
from cadence.transforms.replay_frame_stack import ReplayFrameStack
from cadence.transforms.reward import RewardClipping, RewardScaling
from cadence.transforms.reward_normalizer import RewardNormalizer
from cadence.transforms.sequence import DataTransformerSequence
from cadence.transforms.transformer import DataTransformer
from cadence.transforms.untransformed import UntransformedTimeStep

Builder = Callable[[DataTransformersConfig, Spec, "ReplayBuffer | None"], DataTransformer]


def make_data_transformer(
    config: DataTransformersConfig,
    observation_spec: Spec,
    replay_buffer: ReplayBuffer | None = None,
) -> DataTransformerSequence | None:
    """The transformers ``config.names`` lists, in order; None when it lists none.

    Each transformer is built for the observation spec its predecessor outputs.

    Args:
        config: the experiment's ``data_transformers`` section.
        observation_spec: the environment's observation spec.
        replay_buffer: the off-policy replay buffer, read by HER and `ReplayFrameStack`
            on replayed samples (None for on-policy training, evaluation and play).

    Raises:
        ValueError: a transformer does not fit the observation (the message says why).
        TransformerOrderError: the order breaks DESIGN §6.
    """
    if not config.names:
        return None
    transformers = []
    for name in config.names:
        transformer = _BUILDERS[name](config, observation_spec, replay_buffer)
        observation_spec = transformer.transformed_observation_spec(observation_spec)
        transformers.append(transformer)
    return DataTransformerSequence(transformers)


def _hindsight(config: DataTransformersConfig, spec: Spec, buffer: ReplayBuffer | None):
    her = config.hindsight_experience
    return HindsightExperienceTransformer(
        spec,
        buffer,
        her_proportion=her.her_proportion,
        distance_threshold=her.distance_threshold,
        end_episode_on_success=her.end_episode_on_success,
        achieved_goal_key=her.achieved_goal_key,
        desired_goal_key=her.desired_goal_key,
    )


def _replay_frame_stack(config: DataTransformersConfig, spec: Spec, buffer: ReplayBuffer | None):
    stack = config.replay_frame_stack
    return ReplayFrameStack(spec, stack.num_frames, stack.keys, buffer)


def _observation_normalizer(config: DataTransformersConfig, spec: Spec, _: ReplayBuffer | None):
    normalizer = config.observation_normalizer
    return ObservationNormalizer(spec, normalizer.keys, normalizer.clip, normalizer.epsilon)


def _reward_normalizer(config: DataTransformersConfig, spec: Spec, _: ReplayBuffer | None):
    normalizer = config.reward_normalizer
    return RewardNormalizer(normalizer.gamma, normalizer.clip, normalizer.epsilon)


def _image_scale(config: DataTransformersConfig, spec: Spec, _: ReplayBuffer | None):
    scale = config.image_scale
    return ImageScaleTransformer(spec, scale.keys, scale.minimum, scale.maximum)


_BUILDERS: dict[str, Builder] = {
    "untransformed_time_step": lambda config, spec, buffer: UntransformedTimeStep(),
    "hindsight_experience": _hindsight,
    "replay_frame_stack": _replay_frame_stack,
    "observation_normalizer": _observation_normalizer,
    "reward_clipping": lambda config, spec, buffer: RewardClipping(
        config.reward_clipping.minimum, config.reward_clipping.maximum
    ),
    "reward_normalizer": _reward_normalizer,
    "reward_scaling": lambda config, spec, buffer: RewardScaling(config.reward_scaling.scale),
    "image_scale": _image_scale,
}
