"""TimeStep.to_dict / from_dict: the plain-dict form used by replay rows and checkpoints."""

import torch

from cadence.data.time_step import StepType, TimeStep


def _time_step(offset: float) -> TimeStep:
    return TimeStep(
        step_type=torch.tensor([int(StepType.FIRST), int(StepType.LAST)]),
        reward=torch.tensor([0.0, 1.0]) + offset,
        discount=torch.tensor([1.0, 0.0]),
        observation={"x": torch.arange(4.0).reshape(2, 2) + offset},
        prev_action=torch.zeros(2, 1),
        env_id=torch.arange(2),
        env_info={"success": torch.tensor([0.0, 1.0])},
    )


def test_to_dict_shares_the_leaves_and_nests_untransformed():
    raw = _time_step(0.0)
    time_step = _time_step(10.0).replace(untransformed=raw)
    fields = time_step.to_dict()
    assert list(fields) == [
        "step_type", "reward", "discount", "observation", "prev_action", "env_id", "env_info",
        "untransformed",
    ]  # fmt: skip
    assert fields["reward"] is time_step.reward
    assert fields["untransformed"]["observation"]["x"] is raw.observation["x"]
    assert fields["untransformed"]["untransformed"] is None
    assert "untransformed" not in time_step.to_dict(untransformed=False)


def test_from_dict_inverts_to_dict_with_or_without_untransformed():
    time_step = _time_step(10.0).replace(untransformed=_time_step(0.0))
    back = TimeStep.from_dict(time_step.to_dict())
    assert torch.equal(back.reward, time_step.reward)
    assert torch.equal(
        back.untransformed.observation["x"], time_step.untransformed.observation["x"]
    )
    assert back.untransformed.untransformed is None
    assert TimeStep.from_dict(time_step.to_dict(untransformed=False)).untransformed is None
