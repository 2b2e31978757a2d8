"""`TensorEnvironment` seeding: env ``i`` of a batch depends on ``seed + i`` and its episode only."""

from __future__ import annotations

import pytest
import torch

from cadence.data.time_step import StepType
from cadence.envs.tensor import make_cartpole, make_pendulum
from cadence.envs.tensor.environment import TensorEnvironment

MAKERS = {"CartPole": make_cartpole, "Pendulum": make_pendulum}
LIMIT = 12  # short episodes: many resets per row


def _actions(env: TensorEnvironment, num_steps: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [env.action_spec.sample((env.batch_size,), generator) for _ in range(num_steps)]


def _run(env: TensorEnvironment, actions: list[torch.Tensor]) -> list:
    return [env.reset()] + [env.step(action) for action in actions]


@pytest.mark.parametrize("family", MAKERS)
def test_env_i_replays_the_env_with_the_same_seed_in_another_batch_size(family):
    make = MAKERS[family]
    big = make(8, seed=10, max_episode_steps=LIMIT)  # env 5 + j is seeded 15 + j
    small = make(3, seed=15, max_episode_steps=LIMIT)  # env j is seeded 15 + j
    actions = _actions(big, 100)
    big_steps = _run(big, actions)
    small_steps = _run(small, [a[5:] for a in actions])
    firsts = 0
    for t, (b, s) in enumerate(zip(big_steps, small_steps, strict=True)):
        assert torch.equal(b.step_type[5:], s.step_type), f"step {t}"
        first = s.is_first()
        firsts += int(first.sum())
        # Start states are exact; the physics may round differently in a wider SIMD batch.
        assert torch.equal(b.observation[5:][first], s.observation[first]), f"step {t}"
        torch.testing.assert_close(b.observation[5:], s.observation, msg=f"step {t}")
    assert firsts >= 3 * (100 // LIMIT)  # several episodes per row were compared


@pytest.mark.parametrize("family", MAKERS)
def test_different_envs_and_episodes_start_differently(family):
    env = MAKERS[family](8, seed=0, max_episode_steps=LIMIT)
    starts = [env.reset().observation]
    for action in _actions(env, 2 * (LIMIT + 1) + 1):
        time_step = env.step(action)
        starts.append(time_step.observation[time_step.is_first()])
    starts.append(env.reset().observation)  # a reset starts new episodes, it does not replay
    rows = torch.cat(starts)
    assert len(rows) >= 4 * 8
    assert len({tuple(row.tolist()) for row in rows}) == len(rows)


def test_the_same_seed_gives_the_same_episodes_and_another_seed_others():
    actions = _actions(make_cartpole(4), 80)
    first = _run(make_cartpole(4, seed=3, max_episode_steps=LIMIT), actions)
    again = _run(make_cartpole(4, seed=3, max_episode_steps=LIMIT), actions)
    other = _run(make_cartpole(4, seed=4, max_episode_steps=LIMIT), actions)
    assert all(torch.equal(a.observation, b.observation) for a, b in zip(first, again, strict=True))
    # Seed 4's env 0 is seed 3's env 1.
    assert torch.equal(other[0].observation[0], first[0].observation[1])
    assert not torch.equal(other[0].observation, first[0].observation)


def test_the_all_rows_reset_path_gives_the_same_numbers_as_the_indexed_one():
    """Accelerators compute every row's start state and keep the resetting rows'."""
    actions = _actions(make_cartpole(6), 120)
    indexed = make_cartpole(6, seed=1, max_episode_steps=LIMIT, dtype=torch.float64)
    masked = make_cartpole(6, seed=1, max_episode_steps=LIMIT, dtype=torch.float64)
    masked._reset_by_index = False  # the path a CUDA env takes
    for a, b in zip(_run(indexed, actions), _run(masked, actions), strict=True):
        assert torch.equal(a.observation, b.observation)
        assert torch.equal(a.step_type, b.step_type)
    assert torch.equal(indexed.get_state()["episodes"], masked.get_state()["episodes"])


def test_state_round_trip_continues_the_same_episodes_and_their_successors():
    env = make_cartpole(5, seed=2, max_episode_steps=LIMIT)
    actions = _actions(env, 60)
    _run(env, actions[:7])
    state = env.get_state()
    expected = [env.step(a) for a in actions[7:]]
    assert sum(int(t.is_first().sum()) for t in expected) >= 10  # new episodes were started
    restored = make_cartpole(5, seed=2, max_episode_steps=LIMIT)
    for replay in (env, restored):
        replay.set_state(state)
        for t, (want, action) in enumerate(zip(expected, actions[7:], strict=True)):
            got = replay.step(action)
            assert torch.equal(got.observation, want.observation), f"step {t}"
            assert torch.equal(got.step_type, want.step_type), f"step {t}"
    assert state["episodes"].tolist() == [1] * 5  # the reset's episode, counted per env


def test_an_old_snapshot_without_episode_counters_is_refused():
    env = make_cartpole(2)
    state = env.get_state()
    del state["episodes"]
    with pytest.raises(ValueError, match="no 'episodes' counters"):
        env.set_state(state)


def test_episode_counters_count_each_row_separately():
    env = make_cartpole(2, max_episode_steps=3)
    env.reset()
    env.set_physical_state(torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.19, 2.0]]))
    steps = [env.step(torch.tensor([0, 1])) for _ in range(4)]
    # Row 1's pole falls at once (LAST, then FIRST); row 0 runs to the 3-step limit.
    assert [int(t.step_type[1]) for t in steps[:2]] == [StepType.LAST, StepType.FIRST]
    assert int(steps[3].step_type[0]) == StepType.FIRST
    assert env.get_state()["episodes"].tolist() == [2, 2]
