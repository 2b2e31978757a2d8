"""The Gymnasium wrappers: spaces, values, episode boundaries and picklability."""

from __future__ import annotations

import functools
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from cadence.envs import (
    ContinuousActionClip,
    EnvFrameStack,
    FrameSkip,
    ImageChannelFirst,
    NormalizedAction,
    ObservationMask,
    make_env,
)
from cadence.testing import DictObservationEnv, ImageEnv


class CountingEnv(gym.Env):
    """Observation and reward are the step index; terminates at ``end``; records actions."""

    def __init__(self, end: int = 6, action_space: gym.Space | None = None):
        self.observation_space = spaces.Box(0.0, 100.0, (1,), np.float32)
        self.action_space = action_space or spaces.Discrete(2)
        self._end = end
        self.count = 0
        self.actions: list[Any] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.actions.append(action)
        self.count += 1
        observation = np.array([self.count], np.float32)
        return observation, float(self.count), self.count >= self._end, False, {}


class ImageAndVectorEnv(gym.Env):
    """A ``Dict`` of an ``[H, W, 3]`` image and a vector."""

    def __init__(self):
        self.observation_space = spaces.Dict(
            {
                "pixels": spaces.Box(0, 255, (4, 6, 3), np.uint8),
                "vector": spaces.Box(-1.0, 1.0, (2,), np.float32),
            }
        )
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


# -- EnvFrameStack --------------------------------------------------------------------------------


def test_env_frame_stack_new_axis_keeps_the_last_k_observations_oldest_first():
    env = EnvFrameStack(CountingEnv(end=100), num_stack=3)
    assert env.observation_space.shape == (3, 1)
    observation, _ = env.reset(seed=0)
    np.testing.assert_array_equal(observation[:, 0], [0, 0, 0])  # reset fills every slot
    for expected in ([0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]):
        observation, *_ = env.step(0)
        np.testing.assert_array_equal(observation[:, 0], expected)
        assert env.observation_space.contains(observation)


def test_env_frame_stack_channel_axis_concatenates_channel_first_frames():
    inner = ImageEnv(size=8, channel_first=True)
    env = EnvFrameStack(ImageEnv(size=8, channel_first=True), num_stack=2, axis=0)
    assert env.observation_space.shape == (6, 8, 8)
    assert env.observation_space.dtype == np.uint8
    stacked, _ = env.reset(seed=1)
    frame, _ = inner.reset(seed=1)
    np.testing.assert_array_equal(stacked[:3], frame)
    np.testing.assert_array_equal(stacked[3:], frame)
    for action in (1, 4, 2):
        previous = frame
        stacked, *_ = env.step(action)
        frame, *_ = inner.step(action)
        np.testing.assert_array_equal(stacked[:3], previous)
        np.testing.assert_array_equal(stacked[3:], frame)
        assert env.observation_space.contains(stacked)


def test_env_frame_stack_bounds_are_stacked_too():
    inner = gym.make("CartPole-v1")
    env = EnvFrameStack(inner, num_stack=2, axis=-1)
    assert env.observation_space.shape == (8,)
    np.testing.assert_array_equal(env.observation_space.high[4:], inner.observation_space.high)
    np.testing.assert_array_equal(env.observation_space.low[:4], inner.observation_space.low)


def test_env_frame_stack_reset_forgets_the_previous_episode():
    env = EnvFrameStack(CountingEnv(end=3), num_stack=3)
    env.reset(seed=0)
    for _ in range(3):
        observation, _, terminated, _, _ = env.step(0)
    assert terminated
    np.testing.assert_array_equal(observation[:, 0], [1, 2, 3])
    observation, _ = env.reset()
    np.testing.assert_array_equal(observation[:, 0], [0, 0, 0])


def test_env_frame_stack_returns_fresh_arrays():
    env = EnvFrameStack(CountingEnv(end=100), num_stack=2)
    first, _ = env.reset(seed=0)
    kept = first.copy()
    env.step(0)
    np.testing.assert_array_equal(first, kept)


def test_env_frame_stack_refuses_bad_arguments():
    with pytest.raises(TypeError, match="Box observation"):
        EnvFrameStack(DictObservationEnv(), num_stack=2)
    with pytest.raises(ValueError, match="num_stack >= 1"):
        EnvFrameStack(CountingEnv(), num_stack=0)
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        EnvFrameStack(CountingEnv(), num_stack=2, axis=3)


# -- FrameSkip --------------------------------------------------------------------------------


def test_frame_skip_repeats_the_action_and_sums_rewards():
    inner = CountingEnv(end=100)
    env = FrameSkip(inner, skip=4)
    env.reset(seed=0)
    observation, reward, terminated, truncated, _ = env.step(1)
    assert reward == 1 + 2 + 3 + 4
    assert observation[0] == 4
    assert inner.actions == [1, 1, 1, 1]
    assert not terminated and not truncated


def test_frame_skip_stops_at_termination():
    inner = CountingEnv(end=6)
    env = FrameSkip(inner, skip=4)
    env.reset(seed=0)
    env.step(0)
    observation, reward, terminated, _, _ = env.step(0)
    assert terminated
    assert reward == 5 + 6
    assert observation[0] == 6
    assert inner.count == 6  # never stepped past the end


def test_frame_skip_stops_at_truncation():
    inner = CountingEnv(end=100)
    env = FrameSkip(gym.wrappers.TimeLimit(inner, max_episode_steps=3), skip=4)
    env.reset(seed=0)
    _, reward, terminated, truncated, _ = env.step(0)
    assert truncated and not terminated
    assert reward == 1 + 2 + 3
    assert inner.count == 3


def test_frame_skip_refuses_zero():
    with pytest.raises(ValueError, match="skip >= 1"):
        FrameSkip(CountingEnv(), skip=0)


# -- NormalizedAction and ContinuousActionClip ------------------------------------------------


def _box_env(low, high) -> CountingEnv:
    space = spaces.Box(np.array(low, np.float32), np.array(high, np.float32), dtype=np.float32)
    return CountingEnv(end=100, action_space=space)


def test_normalized_action_maps_minus_one_one_onto_the_bounds():
    inner = _box_env([0.0, -3.0], [1.0, 1.0])
    env = NormalizedAction(inner)
    assert env.action_space == spaces.Box(-1.0, 1.0, (2,), np.float32)
    env.reset(seed=0)
    for action, expected in (
        ([-1.0, -1.0], [0.0, -3.0]),
        ([1.0, 1.0], [1.0, 1.0]),
        ([0.0, 0.0], [0.5, -1.0]),
        ([0.5, -0.5], [0.75, -2.0]),
        ([3.0, -7.0], [1.0, -3.0]),  # clipped to [-1, 1] first
    ):
        env.step(np.array(action, np.float32))
        np.testing.assert_allclose(inner.actions[-1], expected, rtol=1e-6)
        assert inner.actions[-1].dtype == np.float32


def test_normalized_action_on_pendulum():
    env = NormalizedAction(gym.make("Pendulum-v1"))
    np.testing.assert_allclose(env.action(np.array([0.5], np.float32)), [1.0])


def test_normalized_action_refuses_unbounded_and_discrete_actions():
    with pytest.raises(ValueError, match="finite action bounds"):
        NormalizedAction(_box_env([-np.inf], [1.0]))
    with pytest.raises(TypeError, match="Box action space"):
        NormalizedAction(CountingEnv())


def test_continuous_action_clip_clips_to_the_bounds_and_keeps_the_space():
    inner = _box_env([0.0, -3.0], [1.0, 1.0])
    env = ContinuousActionClip(inner)
    assert env.action_space == inner.action_space
    env.reset(seed=0)
    env.step(np.array([2.0, -5.0], np.float32))
    np.testing.assert_array_equal(inner.actions[-1], [1.0, -3.0])
    env.step(np.array([0.25, 0.5], np.float32))
    np.testing.assert_array_equal(inner.actions[-1], [0.25, 0.5])
    with pytest.raises(TypeError, match="Box action space"):
        ContinuousActionClip(CountingEnv())


# -- ImageChannelFirst ------------------------------------------------------------------------


def test_image_channel_first_transposes_frames_and_space():
    env = ImageChannelFirst(ImageEnv(size=8))
    reference = ImageEnv(size=8)
    assert env.observation_space.shape == (3, 8, 8)
    frame, _ = env.reset(seed=2)
    expected, _ = reference.reset(seed=2)
    np.testing.assert_array_equal(frame, expected.transpose(2, 0, 1))
    assert frame.flags["C_CONTIGUOUS"]
    frame, *_ = env.step(3)
    expected, *_ = reference.step(3)
    np.testing.assert_array_equal(frame, expected.transpose(2, 0, 1))
    assert env.observation_space.contains(frame)


def test_image_channel_first_transposes_the_images_of_a_dict():
    env = ImageChannelFirst(ImageAndVectorEnv())
    assert env.observation_space["pixels"].shape == (3, 4, 6)
    assert env.observation_space["vector"].shape == (2,)
    observation, _ = env.reset(seed=0)
    assert observation["pixels"].shape == (3, 4, 6)
    assert env.observation_space.contains(observation)


def test_image_channel_first_refuses_envs_without_images():
    with pytest.raises(TypeError, match="3-D Box observation"):
        ImageChannelFirst(gym.make("CartPole-v1"))
    with pytest.raises(TypeError, match="3-D Box observation"):
        ImageChannelFirst(DictObservationEnv())


# -- ObservationMask ------------------------------------------------------------------------------


def test_observation_mask_keeps_the_given_entries_in_order_with_their_bounds():
    env = ObservationMask(gym.make("CartPole-v1"), keep=[2, 0])
    inner = env.unwrapped.observation_space
    assert env.observation_space.shape == (2,)
    assert env.observation_space.dtype == inner.dtype
    np.testing.assert_array_equal(env.observation_space.high, inner.high[[2, 0]])
    np.testing.assert_array_equal(env.observation_space.low, inner.low[[2, 0]])
    observation, _ = env.reset(seed=3)
    np.testing.assert_array_equal(observation, np.float32(env.unwrapped.state)[[2, 0]])
    for _ in range(3):
        observation, *_ = env.step(1)
        np.testing.assert_array_equal(observation, np.float32(env.unwrapped.state)[[2, 0]])
        assert env.observation_space.contains(observation)


def test_observation_mask_counts_negative_indices_from_the_end():
    env = ObservationMask(CountingEnv(), keep=[-1])
    assert env.observation_space.shape == (1,)
    env.reset(seed=0)
    assert env.step(0)[0].tolist() == [1.0]


@pytest.mark.parametrize(
    ("env", "keep", "error", "match"),
    [
        (DictObservationEnv(), [0], TypeError, "Box observation"),
        (ImageEnv(size=8), [0], TypeError, "1-D Box"),
        (CountingEnv(), [], ValueError, "non-empty list of ints"),
        (CountingEnv(), [0.5], ValueError, "non-empty list of ints"),
        (CountingEnv(), [1], ValueError, r"keep \[1\] out of range"),
        (CountingEnv(), [0, -1], ValueError, "repeats an index"),
    ],
)
def test_observation_mask_refuses_bad_arguments(env, keep, error, match):
    with pytest.raises(error, match=match):
        ObservationMask(env, keep=keep)


# -- picklability (worker processes build wrappers from pickles) ------------------------------


def test_wrapped_envs_pickle_mid_episode_and_continue_identically():
    env = EnvFrameStack(ImageChannelFirst(ImageEnv(size=8)), num_stack=3, axis=0)
    env.reset(seed=4)
    for action in (1, 2, 4):
        env.step(action)
    clone = pickle.loads(pickle.dumps(env))
    for action in (3, 0, 1, 1):
        expected = env.step(action)
        actual = clone.step(action)
        np.testing.assert_array_equal(actual[0], expected[0])
        assert actual[1:4] == expected[1:4]


def _image_env() -> ImageEnv:
    return ImageEnv(size=8)


def _box_actions_env() -> CountingEnv:
    return _box_env([0.0, -3.0], [1.0, 1.0])


BOX_ACTION = np.array([3.0, -0.5], np.float32)  # the first out of [-1, 1]


@pytest.mark.parametrize(
    ("wrapper", "make_inner", "action"),
    [
        (functools.partial(EnvFrameStack, num_stack=2), _box_actions_env, BOX_ACTION),
        (functools.partial(FrameSkip, skip=3), _box_actions_env, BOX_ACTION),
        (NormalizedAction, _box_actions_env, BOX_ACTION),
        (ContinuousActionClip, _box_actions_env, BOX_ACTION),
        (ImageChannelFirst, _image_env, 4),
        (functools.partial(ObservationMask, keep=[0]), _box_actions_env, BOX_ACTION),
    ],
)
def test_wrapper_recipes_pickle_into_wrappers_that_behave_the_same(wrapper, make_inner, action):
    copied = pickle.loads(pickle.dumps(wrapper))
    envs = wrapper(make_inner()), copied(make_inner())
    assert type(envs[1]) is type(envs[0])
    assert envs[1].observation_space == envs[0].observation_space
    assert envs[1].action_space == envs[0].action_space
    expected, actual = (env.reset(seed=3)[0] for env in envs)
    np.testing.assert_array_equal(actual, expected)
    for _ in range(3):
        expected, actual = (env.step(action) for env in envs)
        np.testing.assert_array_equal(actual[0], expected[0])
        assert actual[1:4] == expected[1:4]
    # what reached the inner env (rescaled, clipped, repeated) is the same too
    inner_actions = [np.array(getattr(env.unwrapped, "actions", [])) for env in envs]
    np.testing.assert_array_equal(inner_actions[1], inner_actions[0])


def test_wrappers_reach_parallel_workers_through_make_env():
    wrappers = [ImageChannelFirst, functools.partial(EnvFrameStack, num_stack=2, axis=0)]
    envs = [
        make_env(ImageEnv, 2, backend, seed=1, gym_wrappers=wrappers, env_kwargs={"size": 8})
        for backend in ("serial", "parallel")
    ]
    try:
        serial, parallel = (env.reset() for env in envs)
        assert tuple(parallel.observation.shape) == (2, 6, 8, 8)
        assert parallel.observation.equal(serial.observation)
        action = envs[0].action_spec.sample((2,))
        assert envs[1].step(action).observation.equal(envs[0].step(action).observation)
    finally:
        for env in envs:
            env.close()
