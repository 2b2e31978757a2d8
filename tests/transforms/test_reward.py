"""Reward transformers against hand-computed values: clipping, scaling, and the normalizer's
discounted return (reset at FIRST), frozen in eval mode and on replay."""

import pytest
import torch

from cadence.transforms import RewardClipping, RewardNormalizer, RewardScaling


def test_clipping_and_scaling_on_rollout_and_replay(
    make_time_step, make_steps, make_buffer, window
):
    clip, scale = RewardClipping(-1.0, 2.0), RewardScaling(-0.5)
    step = make_time_step([1, 1, 1], reward=[-5.0, 0.5, 3.0])
    assert clip.transform_time_step(step, ())[0].reward.tolist() == [-1.0, 0.5, 2.0]
    assert scale.transform_time_step(step, ())[0].reward.tolist() == [2.5, -0.25, -1.5]
    buffer = make_buffer(make_steps([[0], [1], [1]], reward=[[0.0], [4.0], [-3.0]]))
    sample = window(buffer, [0], [[0, 1, 2]])
    assert clip.transform_sample(sample).time_step.reward.tolist() == [[0.0, 2.0, -1.0]]
    assert scale.transform_sample(sample).time_step.reward.tolist() == [[0.0, -2.0, 1.5]]
    assert sample.time_step.reward.tolist() == [[0.0, 4.0, -3.0]], "the input is not modified"


def test_clipping_refuses_an_empty_range():
    with pytest.raises(ValueError, match="minimum 1.0 exceeds maximum 0.0"):
        RewardClipping(1.0, 0.0)


def test_reward_normalizer_tracks_the_discounted_return_and_resets_it_at_first(make_time_step):
    normalizer = RewardNormalizer(gamma=0.5, clip=100.0, epsilon=0.0)
    # Two envs; env 1 starts a new episode at the third step.
    rewards = [[0.0, 0.0], [2.0, 4.0], [2.0, 0.0], [4.0, 2.0]]
    step_types = [[0, 0], [1, 1], [1, 0], [1, 1]]
    state = normalizer.initial_state(2)
    for types, reward in zip(step_types, rewards, strict=True):
        step, state = normalizer.transform_time_step(make_time_step(types, reward=reward), state)
    # Returns fed to the statistics (FIRST rows excluded):
    # env 0: 2, 2*0.5+2=3, 3*0.5+4=5.5; env 1: 4, (reset), 2.
    returns = torch.tensor([2.0, 4.0, 3.0, 5.5, 2.0], dtype=torch.float64)
    assert int(normalizer.stats.count) == 5
    torch.testing.assert_close(normalizer.stats.var, returns.var(unbiased=False))
    assert state.tolist() == [5.5, 2.0]
    expected = torch.tensor([4.0, 2.0]) / returns.var(unbiased=False).sqrt().float()
    torch.testing.assert_close(step.reward, expected)


def test_reward_normalizer_is_frozen_in_eval_mode_and_clips(
    make_time_step, make_steps, make_buffer, window
):
    normalizer = RewardNormalizer(gamma=0.0, clip=1.0, epsilon=0.0)
    normalizer.stats.update(torch.tensor([2.0, -2.0]))  # var 4, std 2
    normalizer.eval()
    step, state = normalizer.transform_time_step(make_time_step([1, 1], reward=[1.0, 6.0]), ())
    assert step.reward.tolist() == [0.5, 1.0]
    assert state == () and int(normalizer.stats.count) == 2
    normalizer.train()
    buffer = make_buffer(make_steps([[0], [1]], reward=[[0.0], [-1.0]]))
    assert normalizer.transform_sample(window(buffer, [0], [[0, 1]])).time_step.reward.tolist() == [
        [0.0, -0.5]
    ]
    assert int(normalizer.stats.count) == 2, "replay does not update the statistics"
