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
