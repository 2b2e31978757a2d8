"""The contract every data transformer passes (built from its config name): outputs fit the
transformed spec on both paths, replay and rollout agree (bar HER, which relabels on replay
only), inputs and the buffer are never modified, and the state survives a weights-only save."""

import pytest
import torch

from cadence.data.specs import BoundedTensorSpec, CompositeSpec, TensorSpec
from cadence.data.time_step import TimeStep
from cadence.transforms import DataTransformersConfig, make_data_transformer
from cadence.transforms.names import TRANSFORMER_CLASSES

SPEC = CompositeSpec(
    {
        "pixels": BoundedTensorSpec((1, 8, 8), torch.uint8, 0, 255),
        "vector": TensorSpec((3,)),
        "achieved_goal": TensorSpec((2,)),
        "desired_goal": TensorSpec((2,)),
    }
)
# Two envs, 12 steps, episodes of different lengths ending both ways.
STEP_TYPES = [
    [0, 0],
    [1, 1],
    [1, 2],
    [2, 0],
    [0, 1],
    [1, 1],
    [1, 1],
    [1, 2],
    [2, 0],
    [0, 1],
    [1, 1],
    [1, 1],
]


def _stream(make_steps) -> TimeStep:
    generator = torch.Generator().manual_seed(0)
    steps, envs = len(STEP_TYPES), 2
    observation = {
        "pixels": torch.randint(0, 256, (steps, envs, 1, 8, 8), generator=generator).to(
            torch.uint8
        ),
        "vector": torch.randn(steps, envs, 3, generator=generator) * 5 + 2,
        "achieved_goal": torch.randn(steps, envs, 2, generator=generator),
        "desired_goal": torch.randn(steps, envs, 2, generator=generator),
    }
    reward = torch.randn(steps, envs, generator=generator) * 3
    reward[torch.tensor(STEP_TYPES) == 0] = 0.0
    discount = (torch.tensor(STEP_TYPES) != 2).float()
    return make_steps(STEP_TYPES, observation=observation, reward=reward, discount=discount)


def _build(name, buffer):
    return make_data_transformer(DataTransformersConfig(names=[name]), SPEC, buffer)


def _rollout(transformer, stream):
    state, steps = transformer.initial_state(2), []
    for t in range(stream.step_type.shape[0]):
        step, state = transformer.transform_time_step(stream[t], state)
        steps.append(step.replace(untransformed=None))
    return TimeStep.stack(steps, dim=1)  # [B, T]


@pytest.mark.parametrize("name", list(TRANSFORMER_CLASSES))
def test_transformer_contract(name, make_steps, make_buffer, window, tmp_path):
    stream = _stream(make_steps)
    buffer = make_buffer(stream)
    transformer = _build(name, buffer)
    out_spec = transformer.transformed_observation_spec(SPEC)
    _rollout(transformer, stream)  # training mode: statistics move
    transformer.eval()
    rollout = _rollout(transformer, stream)
    stored = {k: v.clone() for k, v in buffer.storage.fields.items()}
    sample = window(buffer, [0, 1], [list(range(len(STEP_TYPES)))] * 2)
    before = sample.time_step.clone()
    replayed = transformer.transform_sample(sample).time_step

    assert out_spec.contains(rollout.observation), "rollout output fits the spec"
    assert out_spec.contains(replayed.observation), "replay output fits the spec"
    for key, value in buffer.storage.fields.items():
        assert torch.equal(value, stored[key]), f"the buffer's {key} changed"
    after = sample.time_step
    for field in ("reward", "discount", "step_type"):
        assert torch.equal(getattr(after, field), getattr(before, field)), f"input {field} changed"
    for key in SPEC:
        assert torch.equal(after.observation[key], before.observation[key]), f"input {key} changed"
    if name != "hindsight_experience":
        for field in ("reward", "discount", "step_type"):
            torch.testing.assert_close(getattr(replayed, field), getattr(rollout, field))
        for key in SPEC:
            torch.testing.assert_close(replayed.observation[key], rollout.observation[key])

    torch.save(transformer.state_dict(), tmp_path / "state.pt")
    restored = _build(name, buffer)
    restored.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    for key, value in transformer.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key
