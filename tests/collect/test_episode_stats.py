"""EpisodeStats: returns and lengths of the episodes an unroll completes, by hand."""

import torch

from cadence.collect import EpisodeStats
from cadence.data.time_step import StepType, TimeStep

F, M, L = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


def _steps(step_types, rewards, info=None):
    steps = torch.tensor(step_types)
    return TimeStep(
        step_type=steps,
        reward=torch.tensor(rewards),
        discount=torch.ones(steps.shape),
        observation=torch.zeros(*steps.shape, 1),
        prev_action=torch.zeros(steps.shape, dtype=torch.int64),
        env_id=torch.zeros(steps.shape, dtype=torch.int64),
        env_info=info or {},
    )


def test_episodes_spanning_unrolls_are_summed_over_their_non_first_steps():
    stats = EpisodeStats(batch_size=2)
    # Env 0: an episode of 3 actions ending in the second unroll; env 1: one of 2 actions.
    first = stats.update(_steps([[M, M], [M, L]], [[1.0, 2.0], [3.0, 4.0]]))
    assert first["return"].tolist() == [6.0] and first["length"].tolist() == [2]
    second = stats.update(
        _steps(
            [[L, F], [F, M]],
            [[5.0, 0.0], [0.0, 7.0]],
            {"is_success": torch.tensor([[1.0, 0.0], [0.0, 0.0]])},
        )
    )
    assert second["return"].tolist() == [9.0] and second["length"].tolist() == [3]
    assert second["info/is_success"].tolist() == [1.0]  # the info at the LAST step
    assert stats.state_dict()["return"].tolist() == [0.0, 7.0]  # env 1's new episode so far


def test_state_dict_round_trip_continues_the_sums():
    stats = EpisodeStats(batch_size=1)
    stats.update(_steps([[M], [M]], [[1.0], [1.0]]))
    copy = EpisodeStats(batch_size=1)
    copy.load_state_dict(stats.state_dict())
    ended = copy.update(_steps([[L]], [[1.0]]))
    assert ended["return"].tolist() == [3.0] and ended["length"].tolist() == [3]


def test_no_completed_episode_gives_empty_stats():
    stats = EpisodeStats(batch_size=3).update(_steps([[M, M, M]], [[1.0, 1.0, 1.0]]))
    assert stats["return"].numel() == 0 and stats["length"].numel() == 0


def _one_step_at_a_time(returns, lengths, time_steps):
    """The definition, step by step: what `EpisodeStats.update` computes all at once."""
    completed_returns, completed_lengths = [], []
    for t in range(time_steps.step_type.shape[0]):
        first = time_steps.step_type[t] == F
        returns = torch.where(first, 0.0, returns + time_steps.reward[t].double())
        lengths = torch.where(first, 0, lengths + 1)
        last = time_steps.step_type[t] == L
        completed_returns.append(returns[last])
        completed_lengths.append(lengths[last])
    return torch.cat(completed_returns), torch.cat(completed_lengths), returns, lengths


def test_random_unrolls_match_the_step_by_step_definition():
    generator = torch.Generator().manual_seed(0)
    stats = EpisodeStats(batch_size=5)
    returns, lengths = torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.int64)
    previous = torch.full((5,), M)
    for _ in range(50):  # episodes run across unrolls of random lengths
        length = int(torch.randint(1, 30, (1,), generator=generator))
        step_types = torch.empty(length, 5, dtype=torch.int64)
        for t in range(length):
            ends = torch.rand(5, generator=generator) < 0.1
            step_types[t] = torch.where(previous == L, F, torch.where(ends, L, M))
            previous = step_types[t]
        time_steps = _steps(
            step_types.tolist(), torch.randn(length, 5, generator=generator).tolist()
        )
        got = stats.update(time_steps)
        want_returns, want_lengths, returns, lengths = _one_step_at_a_time(
            returns, lengths, time_steps
        )
        assert got["length"].equal(want_lengths)
        assert torch.allclose(got["return"], want_returns, rtol=0, atol=1e-9)
