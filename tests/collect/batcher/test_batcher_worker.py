"""The worker's observation, built on its fast path, is the DictTensor the checked path builds."""

from __future__ import annotations

import pytest
import torch

from cadence.collect.batcher.worker import observation_of
from cadence.data import DictTensor
from cadence.data.time_step import TimeStep


def time_step(observation, env_info) -> TimeStep:
    return TimeStep(
        step_type=torch.tensor([0, 1, 2]),
        reward=torch.tensor([0.0, 1.0, 2.0]),
        discount=torch.tensor([1.0, 1.0, 0.0]),
        observation=observation,
        prev_action=torch.tensor([0, 1, 1]),
        env_id=torch.tensor([5, 6, 7]),
        env_info=env_info,
    )


def checked(step: TimeStep, env_ids: torch.Tensor) -> DictTensor:
    """What `observation_of` must give: the same values through DictTensor's own checks."""
    values = {
        "frame": step.observation,
        "reward": step.reward,
        "done": step.step_type == 2,
        "initial_state": step.step_type == 0,
        "last_action": step.prev_action,
        "step_type": step.step_type,
        "discount": step.discount,
        "env_id": env_ids,
    }
    if step.env_info:
        values["info"] = step.env_info
    return DictTensor(values)


@pytest.mark.parametrize(
    "observation, env_info",
    [
        (torch.arange(12.0).reshape(3, 4), {}),
        (torch.arange(12.0).reshape(3, 4), {"x_velocity": torch.ones(3)}),
        ({"pos": torch.zeros(3, 2), "image": torch.ones(3, 1, 2, 2)}, {"a": torch.ones(3)}),
        (torch.zeros(3, 1), {"grouped/key": torch.ones(3)}),  # "/" nests: the checked path
    ],
)
def test_observation_is_the_checked_dict_tensor(observation, env_info):
    step = time_step(observation, env_info)
    env_ids = torch.tensor([5, 6, 7])
    fast, expected = observation_of(step, env_ids), checked(step, env_ids)
    assert fast.n_elems() == 3
    assert sorted(fast.keys()) == sorted(expected.keys())
    for key in expected.keys():
        assert fast[key].dtype == expected[key].dtype, key
        assert torch.equal(fast[key], expected[key]), key


def test_observation_refuses_rows_of_different_lengths():
    step = time_step(torch.zeros(2, 4), {})  # 2 frames for 3 env ids
    with pytest.raises((RuntimeError, ValueError)):
        observation_of(step, torch.tensor([5, 6, 7]))
