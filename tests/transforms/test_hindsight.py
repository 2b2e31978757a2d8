"""HindsightExperienceTransformer: goals come only from future achieved goals of the same
episode, rewards are recomputed for them, her_proportion is the relabelled fraction, and
with end_episode_on_success the discount and step type follow the new goal."""

import pytest
import torch

from cadence.data.specs import CompositeSpec, TensorSpec
from cadence.transforms import HindsightExperienceTransformer, sparse_goal_reward

F, M, L = 0, 1, 2
# One env: episode A at times 0-4 (terminated), episode B from time 5 (still running).
STEP_TYPES = [F, M, M, M, L, F, M]
SPEC = CompositeSpec({"achieved_goal": TensorSpec((1,)), "desired_goal": TensorSpec((1,))})
UNREACHED = 100.0


def _buffer(make_steps, make_buffer):
    """Achieved goal at time t is [t]; every desired goal is [100], never reached."""
    times = torch.arange(len(STEP_TYPES), dtype=torch.float32).view(-1, 1, 1)
    observation = {"achieved_goal": times, "desired_goal": torch.full_like(times, UNREACHED)}
    rewards = [[0.0] if s == F else [-1.0] for s in STEP_TYPES]
    discounts = [[0.0] if s == L else [1.0] for s in STEP_TYPES]
    steps = make_steps(
        [[s] for s in STEP_TYPES], observation=observation, reward=rewards, discount=discounts
    )
    return make_buffer(steps)


def _her(buffer, **kwargs):
    kwargs = {"her_proportion": 1.0, "distance_threshold": 0.5, **kwargs}
    return HindsightExperienceTransformer(SPEC, buffer, **kwargs)


def test_goals_come_from_the_future_of_the_same_episode(make_steps, make_buffer, window):
    buffer = _buffer(make_steps, make_buffer)
    her = _her(buffer)
    torch.manual_seed(0)
    sample = her.transform_sample(window(buffer, [0] * 600, [[1, 2]] * 600))
    goals = sample.time_step.observation["desired_goal"][..., 0]
    assert torch.equal(goals[:, 0], goals[:, 1]), "one goal per window"
    # Window at times 1-2 of episode A (ends at 4): the goal is achieved at time 2, 3 or 4.
    assert set(goals[:, 0].tolist()) == {2.0, 3.0, 4.0}
    reward = sample.time_step.reward
    assert torch.equal(reward[:, 1], torch.where(goals[:, 1] == 2.0, 0.0, -1.0))
    assert torch.equal(reward[:, 0], torch.where(goals[:, 0] == 1.0, 0.0, -1.0))


def test_a_window_crossing_into_the_next_episode_relabels_only_its_first_episode(
    make_steps, make_buffer, window
):
    buffer = _buffer(make_steps, make_buffer)
    sample = _her(buffer).transform_sample(window(buffer, [0, 0], [[4, 5], [5, 6]]))
    goals = sample.time_step.observation["desired_goal"][..., 0]
    # [4, 5]: time 4 is episode A's LAST, so its goal is the one achieved there; time 5 keeps
    # its own.
    assert goals[0].tolist() == [4.0, UNREACHED]
    # [5, 6]: episode B is still running; its newest step (6) is as far as the future goes.
    assert goals[1].tolist() == [6.0, 6.0]
    reward = sample.time_step.reward
    assert reward[0].tolist() == [0.0, 0.0], "time 4 reaches its new goal; a FIRST keeps its reward"
    assert reward[1].tolist() == [0.0, 0.0]


def test_her_proportion_is_the_relabelled_fraction_and_zero_changes_nothing(
    make_steps, make_buffer, window
):
    buffer = _buffer(make_steps, make_buffer)
    sample = window(buffer, [0] * 4000, [[1, 2]] * 4000)
    torch.manual_seed(1)
    relabelled = _her(buffer, her_proportion=0.3).transform_sample(sample)
    fraction = (
        (relabelled.time_step.observation["desired_goal"][:, 0, 0] != UNREACHED).float().mean()
    )
    assert abs(float(fraction) - 0.3) < 0.03
    untouched = _her(buffer, her_proportion=0.0).transform_sample(sample)
    for field in ("reward", "discount", "step_type"):
        assert torch.equal(getattr(untouched.time_step, field), getattr(sample.time_step, field))
    assert torch.equal(
        untouched.time_step.observation["desired_goal"],
        sample.time_step.observation["desired_goal"],
    )


def test_end_episode_on_success_makes_reached_goals_terminal_and_others_not(
    make_steps, make_buffer, window
):
    buffer = _buffer(make_steps, make_buffer)
    her = _her(buffer, end_episode_on_success=True)
    torch.manual_seed(2)
    sample = her.transform_sample(window(buffer, [0] * 200, [[2, 3, 4]] * 200))
    goal = sample.time_step.observation["desired_goal"][:, 0, 0]
    assert set(goal.tolist()) == {4.0}, "the window's last step is the episode's last"
    time_step = sample.time_step
    assert time_step.discount[0].tolist() == [1.0, 1.0, 0.0]
    assert time_step.step_type[0].tolist() == [M, M, L]
    # Relabelled with the goal achieved at time 3, a MID step becomes terminal while the
    # original terminal LAST (time 4) no longer reaches the goal and bootstraps.
    mask = torch.ones(1, 4, dtype=torch.bool)
    sample = her._relabel(window(buffer, [0], [[1, 2, 3, 4]]), torch.tensor([[3.0]]), mask)
    assert sample.time_step.step_type[0].tolist() == [M, M, L, L]
    assert sample.time_step.discount[0].tolist() == [1.0, 1.0, 0.0, 1.0]
    assert sample.time_step.reward[0].tolist() == [-1.0, -1.0, 0.0, -1.0]


def test_the_rollout_path_and_the_buffer_are_left_alone(
    make_time_step, make_steps, make_buffer, window
):
    buffer = _buffer(make_steps, make_buffer)
    before = {k: v.clone() for k, v in buffer.storage.fields.items()}
    _her(buffer).transform_sample(window(buffer, [0] * 8, [[0, 1]] * 8))
    for key, value in buffer.storage.fields.items():
        assert torch.equal(value, before[key]), key
    observation = {"achieved_goal": torch.ones(2, 1), "desired_goal": torch.zeros(2, 1)}
    step = make_time_step([M, M], observation=observation)
    assert _her(buffer).transform_time_step(step, ())[0] is step


def test_goal_keys_are_checked_at_construction():
    with pytest.raises(ValueError, match="no key 'desired_goal'"):
        HindsightExperienceTransformer(CompositeSpec({"achieved_goal": TensorSpec((2,))}))
    spec = CompositeSpec({"achieved_goal": TensorSpec((2,)), "desired_goal": TensorSpec((3,))})
    with pytest.raises(ValueError, match="goals must be comparable"):
        HindsightExperienceTransformer(spec)


def test_sparse_goal_reward_uses_the_euclidean_distance():
    achieved = torch.tensor([[0.0, 0.0], [0.03, 0.04], [0.03, 0.05]])
    assert sparse_goal_reward(achieved, torch.zeros(3, 2), 0.05).tolist() == [0.0, 0.0, -1.0]
