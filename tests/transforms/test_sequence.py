"""DataTransformerSequence: order violations fail at construction naming both transformers,
transforms chain in order on both paths, UntransformedTimeStep keeps the raw data, and the
config lists and builds transformers."""

import attrs
import pytest
import torch

from cadence.data.specs import BoundedTensorSpec, CompositeSpec, TensorSpec
from cadence.replay.rows import time_step_from_rows
from cadence.transforms import (
    DataTransformersConfig,
    DataTransformerSequence,
    HindsightExperienceTransformer,
    ObservationNormalizer,
    ReplayFrameStack,
    RewardClipping,
    RewardScaling,
    TransformerOrderError,
    UntransformedTimeStep,
    make_data_transformer,
)

GOALS = CompositeSpec({"achieved_goal": TensorSpec((1,)), "desired_goal": TensorSpec((1,))})


@pytest.mark.parametrize(
    ("transformers", "later", "earlier"),
    [
        (
            lambda: [RewardScaling(2.0), UntransformedTimeStep()],
            "UntransformedTimeStep",
            "RewardScaling",
        ),
        (
            lambda: [ObservationNormalizer(GOALS), HindsightExperienceTransformer(GOALS)],
            "HindsightExperienceTransformer",
            "ObservationNormalizer",
        ),
        (
            lambda: [ReplayFrameStack(GOALS, 2), RewardClipping(), UntransformedTimeStep()],
            "UntransformedTimeStep",
            "ReplayFrameStack",
        ),
        (
            lambda: [RewardClipping(), ReplayFrameStack(TensorSpec((1,)), 2)],
            "ReplayFrameStack",
            "RewardClipping",
        ),
    ],
)
def test_order_violations_fail_at_construction_naming_both_transformers(
    transformers, later, earlier
):
    with pytest.raises(TransformerOrderError) as error:
        DataTransformerSequence(transformers())
    message = str(error.value)
    assert f"{later} (position" in message and f"must come before {earlier}" in message
    assert f"Move {later} ahead of {earlier}" in message


def test_allowed_orders_build():
    sequence = DataTransformerSequence(
        [
            UntransformedTimeStep(),
            HindsightExperienceTransformer(GOALS),
            ReplayFrameStack(GOALS, 2, keys=["achieved_goal"]),
            ObservationNormalizer(GOALS),
            RewardClipping(),
        ]
    )
    assert len(sequence) == 5
    with pytest.raises(TransformerOrderError, match="both claim the first place"):
        DataTransformerSequence([UntransformedTimeStep(), UntransformedTimeStep()])


def test_transforms_chain_in_order_and_the_raw_step_stays_available(
    make_time_step, make_steps, make_buffer, window
):
    sequence = DataTransformerSequence(
        [UntransformedTimeStep(), RewardScaling(3.0), RewardClipping(-1.0, 1.0)]
    )
    step, state = sequence.transform_time_step(make_time_step([1, 1], reward=[0.2, -0.5]), ())
    torch.testing.assert_close(step.reward, torch.tensor([0.6, -1.0]))
    torch.testing.assert_close(step.untransformed.reward, torch.tensor([0.2, -0.5]))
    assert state == ((), (), ())
    buffer = make_buffer(make_steps([[0], [1]], reward=[[0.0], [0.25]]))
    sample = sequence.transform_sample(window(buffer, [0], [[0, 1]]))
    replayed = sample.time_step
    torch.testing.assert_close(replayed.reward, torch.tensor([[0.0, 0.75]]))
    torch.testing.assert_close(replayed.untransformed.reward, torch.tensor([[0.0, 0.25]]))
    assert replayed.untransformed.untransformed is None
    assert time_step_from_rows(sample.steps).untransformed.step_type.tolist() == [[0, 1]]


def test_the_observation_spec_chains_through_the_sequence():
    spec = CompositeSpec({"pixels": BoundedTensorSpec((1, 8, 8), torch.uint8, 0, 255)})
    config = DataTransformersConfig(names=["replay_frame_stack", "image_scale"])
    sequence = make_data_transformer(config, spec)
    out = sequence.transformed_observation_spec(spec)
    assert out["pixels"].shape == (4, 8, 8) and out["pixels"].dtype == torch.float32


def test_the_config_builds_the_listed_transformers_with_their_options():
    config = DataTransformersConfig(
        names=["hindsight_experience", "observation_normalizer", "reward_scaling"],
        hindsight_experience=attrs.evolve(
            DataTransformersConfig().hindsight_experience, her_proportion=0.5
        ),
    )
    sequence = make_data_transformer(config, GOALS, replay_buffer=None)
    kinds = [type(t).__name__ for t in sequence]
    assert kinds == ["HindsightExperienceTransformer", "ObservationNormalizer", "RewardScaling"]
    assert sequence.transformers[0].her_proportion == 0.5
    assert make_data_transformer(DataTransformersConfig(), GOALS) is None


def test_the_config_refuses_bad_orders_unknown_and_repeated_names():
    with pytest.raises(
        TransformerOrderError, match="replay_frame_stack .* must come before observation_normalizer"
    ):
        DataTransformersConfig(names=["observation_normalizer", "replay_frame_stack"])
    with pytest.raises(ValueError, match="unknown data transformer 'normaliser'"):
        DataTransformersConfig(names=["normaliser"])
    with pytest.raises(ValueError, match="repeated: reward_scaling"):
        DataTransformersConfig(names=["reward_scaling", "reward_scaling"])
