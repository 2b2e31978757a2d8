"""`GymAdapter`: Gymnasium's 5-tuple to a numpy `TimeStep` by the discount table."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from cadence.data.specs import TensorSpec
from cadence.data.time_step import StepType
from cadence.envs import GymAdapter, SerialEnvironment
from cadence.testing import DictObservationEnv


class ScriptedEnv(gym.Env):
    """Ends episodes as scripted: ``script[i]`` is ``(terminated, truncated)`` of step i."""

    def __init__(self, script: list[tuple[bool, bool]], infos: list[dict[str, Any]] | None = None):
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.action_space = spaces.Discrete(3)
        self._script = script
        self._infos = infos or [{}]
        self.num_steps = 0
        self.num_resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.num_resets += 1
        return np.array([0.5, -0.5]), dict(self._infos[0])

    def step(self, action):
        terminated, truncated = self._script[self.num_steps % len(self._script)]
        self.num_steps += 1
        info = self._infos[min(self.num_steps, len(self._infos) - 1)]
        observation = np.array([self.num_steps, float(action)])
        return observation, 0.25 * self.num_steps, terminated, truncated, dict(info)


def _adapter(script, **kwargs) -> GymAdapter:
    return GymAdapter(ScriptedEnv(script), env_id=4, seed=0, env_info_keys=[], **kwargs)


@pytest.mark.parametrize(
    ("terminated", "truncated", "step_type", "discount"),
    [
        (False, False, StepType.MID, 1.0),
        (True, False, StepType.LAST, 0.0),
        (False, True, StepType.LAST, 1.0),
        (True, True, StepType.LAST, 0.0),  # termination wins
    ],
)
def test_discount_table(terminated, truncated, step_type, discount):
    env = _adapter([(terminated, truncated)])
    env.reset()
    time_step = env.step(np.int64(2))
    assert time_step.step_type == step_type
    assert time_step.discount == discount
    assert time_step.reward == 0.25
    assert time_step.env_id == 4
    assert time_step.prev_action == 2


def test_the_step_after_last_is_first_from_reset_and_ignores_the_action():
    env = _adapter([(False, False), (False, True)])
    first = env.reset()
    assert (first.step_type, first.reward, first.discount) == (StepType.FIRST, 0.0, 1.0)
    assert env.step(np.int64(1)).step_type == StepType.MID
    assert env.step(np.int64(1)).step_type == StepType.LAST
    inner = env.gym_env
    steps_before = inner.num_steps
    after = env.step(np.int64(2))
    assert after.step_type == StepType.FIRST
    assert (after.reward, after.discount, after.prev_action) == (0.0, 1.0, 0)
    assert inner.num_steps == steps_before  # the action went nowhere
    assert inner.num_resets == 2


def test_step_before_reset_resets():
    env = _adapter([(False, False)])
    assert env.step(np.int64(1)).step_type == StepType.FIRST


def test_observations_become_the_spec_dtype():
    env = _adapter([(False, False)])
    assert env.observation_spec == TensorSpec((2,), torch.float32)
    observation = env.reset().observation
    assert observation.dtype == np.float32
    np.testing.assert_array_equal(observation, [0.5, -0.5])


def test_env_info_spec_holds_the_numeric_scalar_keys_found_by_probing():
    reset_info = {"int": 3, "np_float": np.float32(1.5), "flag": True, "text": "no"}
    step_info = {
        "float": 2.5,
        "zero_d": np.array(7.0),
        "vector": np.ones(3),
        "list": [1, 2],
        "int": 4,
    }
    env = GymAdapter(ScriptedEnv([(False, False)], [reset_info, step_info]), seed=0)
    assert set(env.env_info_spec) == {"int", "np_float", "flag", "float", "zero_d"}
    assert all(spec == TensorSpec((), torch.float32) for spec in env.env_info_spec.values())
    first = env.reset()
    assert first.env_info == {"int": 3.0, "np_float": 1.5, "flag": 1.0, "float": 0.0, "zero_d": 0.0}
    mid = env.step(np.int64(0))
    assert mid.env_info == {"int": 4.0, "np_float": 0.0, "flag": 0.0, "float": 2.5, "zero_d": 7.0}
    assert all(isinstance(v, float) for v in mid.env_info.values())


def test_env_info_spec_is_fixed_after_construction():
    infos = [{"a": 1.0}, {"a": 2.0}, {"a": 3.0, "late": 9.0}]
    env = GymAdapter(ScriptedEnv([(False, False)], infos), seed=0)
    env.reset()
    for _ in range(3):
        assert set(env.step(np.int64(0)).env_info) == {"a"}


def test_explicit_env_info_keys_skip_probing():
    inner = ScriptedEnv([(False, False)], [{"a": 1.0, "b": 2.0}])
    env = GymAdapter(inner, seed=0, env_info_keys=["b"])
    assert inner.num_steps == 0
    assert list(env.env_info_spec) == ["b"]
    assert env.reset().env_info == {"b": 2.0}


def test_the_first_reset_is_seeded_and_later_resets_continue_its_rng():
    env = GymAdapter(gym.make("CartPole-v1"), seed=7)
    reference = gym.make("CartPole-v1")
    np.testing.assert_array_equal(env.reset().observation, reference.reset(seed=7)[0])
    np.testing.assert_array_equal(env.reset().observation, reference.reset()[0])


def test_tuple_observations_become_dicts_keyed_by_position():
    class TupleEnv(ScriptedEnv):
        def __init__(self):
            super().__init__([(False, False)])
            self.observation_space = spaces.Tuple(
                (spaces.Discrete(4), spaces.Box(0.0, 1.0, (2,), np.float32))
            )

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return (np.int64(3), np.array([0.25, 0.75], np.float32)), {}

    env = GymAdapter(TupleEnv(), seed=0)
    observation = env.reset().observation
    assert set(env.observation_spec) == {"0", "1"}
    assert observation["0"] == 3
    np.testing.assert_array_equal(observation["1"], [0.25, 0.75])


class _StartEnv(gym.Env):
    """Discrete values that do not start at 0: the observation echoes the last action."""

    def __init__(self, action_space):
        self.action_space = action_space
        self.observation_space = spaces.Dict(
            {
                "cell": spaces.Discrete(5, start=10),
                "echo": spaces.MultiDiscrete([3, 4], start=[-1, 2]),
                "inner": spaces.Dict({"level": spaces.Discrete(3)}),  # starts at 0
            }
        )
        self.actions = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"cell": np.int64(14), "echo": np.array([-1, 2]), "inner": {"level": 2}}, {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.actions.append(action)
        echo = np.array([int(np.ravel(action)[0]), 5])
        observation = {"cell": np.int64(10), "echo": echo, "inner": {"level": 1}}
        return observation, 0.0, False, False, {}


@pytest.mark.parametrize(
    ("action_space", "action", "gym_action"),
    [
        (spaces.Discrete(3, start=-1), np.int64(0), -1),  # sell, hold, buy as -1, 0, 1
        (spaces.MultiDiscrete([3, 2], start=[-1, 7]), np.array([2, 0]), [1, 7]),
    ],
)
def test_discrete_spaces_that_do_not_start_at_0_are_counted_from_0(
    action_space, action, gym_action
):
    """Their specs count from 0, as every network and algorithm does; the adapter shifts
    observations down and actions up by the space's start."""
    env = GymAdapter(_StartEnv(action_space), seed=0)
    assert env.observation_spec["cell"].nvec == 5
    assert env.observation_spec["echo"].nvec.tolist() == [3, 4]
    size = action_space.n if isinstance(action_space, spaces.Discrete) else action_space.nvec
    np.testing.assert_array_equal(env.action_spec.nvec, size)
    first = env.reset().observation
    assert first["cell"] == 4 and first["echo"].tolist() == [0, 0]
    assert first["inner"]["level"] == 2
    observation = env.step(action).observation
    np.testing.assert_array_equal(env.gym_env.unwrapped.actions[-1], gym_action)
    assert observation["cell"] == 0 and observation["inner"]["level"] == 1
    assert observation["echo"].tolist() == [np.ravel(gym_action)[0] + 1, 3]
    assert env.observation_spec["echo"].contains(torch.as_tensor(observation["echo"]))


class _NestedEnv(gym.Env):
    """A Dict action and observation holding a Tuple and a Discrete that starts at 5."""

    def __init__(self):
        inner = spaces.Tuple((spaces.Discrete(2), spaces.Box(-1.0, 1.0, (2,), np.float32)))
        self.action_space = spaces.Dict({"shift": spaces.Discrete(3, start=5), "pair": inner})
        self.observation_space = spaces.Dict({"pair": inner})
        self.actions = []

    def reset(self, *, seed=None, options=None):
        return {"pair": (1, np.array([0.5, -0.5], np.float32))}, {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.actions.append(action)
        return {"pair": (0, np.zeros(2, np.float32))}, 0.0, False, False, {}


def test_tuples_and_starts_inside_a_dict_are_converted_both_ways():
    """A Tuple at any depth is a dict keyed "0", "1"... to cadence, and goes back to the env
    as a tuple; a Discrete entry that starts at 5 is counted from 0."""
    env = GymAdapter(_NestedEnv(), seed=0)
    assert set(env.action_spec) == {"pair", "shift"} and set(env.action_spec["pair"]) == {"0", "1"}
    assert env.action_spec["shift"].nvec == 3
    first = env.reset().observation
    assert first["pair"]["0"] == 1 and first["pair"]["1"].tolist() == [0.5, -0.5]
    action = {"shift": np.array(2), "pair": {"0": np.array(1), "1": np.zeros(2, np.float32)}}
    env.step(action)
    sent = env.gym_env.unwrapped.actions[-1]
    assert sent["shift"] == 7 and isinstance(sent["pair"], tuple) and sent["pair"][0] == 1


def test_dict_observations_land_in_their_fields_whatever_the_key_order():
    # Gymnasium sorts a Dict space's keys; the env returns them in its own order.
    env = SerialEnvironment([lambda: GymAdapter(DictObservationEnv(), seed=5)])
    assert list(env.observation_spec) == ["count", "flags", "position"]
    reference = DictObservationEnv()
    observation, _ = reference.reset(seed=5)
    time_step = env.reset()
    for key, value in observation.items():
        np.testing.assert_array_equal(time_step.observation[key][0].numpy(), value)
    action = {"jump": torch.tensor([1]), "move": torch.tensor([[0.5, -0.5, 0.0]])}
    time_step = env.step(action)
    observation, *_ = reference.step({"jump": 1, "move": np.array([0.5, -0.5, 0.0], np.float32)})
    for key, value in observation.items():
        np.testing.assert_array_equal(time_step.observation[key][0].numpy(), value)
    assert time_step.prev_action["jump"].tolist() == [1]
    assert time_step.prev_action["move"].tolist() == [[0.5, -0.5, 0.0]]


def test_state_round_trip_continues_the_same_episode():
    env = GymAdapter(gym.make("CartPole-v1"), seed=3)
    env.reset()
    rng = np.random.default_rng(0)
    for _ in range(5):
        env.step(np.int64(rng.integers(2)))
    state = env.get_state()
    actions = [np.int64(a) for a in rng.integers(0, 2, 40)]
    expected = [env.step(a) for a in actions]
    env.set_state(state)
    _assert_steps_as(env, actions, expected)


def _assert_steps_as(env: GymAdapter, actions: list, expected: list) -> None:
    """``env`` answers ``actions`` with exactly the ``expected`` time steps."""
    for action, want in zip(actions, expected, strict=True):
        got = env.step(action)
        assert (got.step_type, got.reward, got.discount) == (
            want.step_type,
            want.reward,
            want.discount,
        )
        np.testing.assert_array_equal(got.observation, want.observation)
        assert got.env_info == want.env_info


@pytest.mark.parametrize("name", ["Hopper-v5", "Ant-v5"])
def test_a_mujoco_state_restores_the_simulation_into_a_new_env(name):
    """A MuJoCo env pickles as its constructor's arguments; its simulation must come back too.

    Into a new env, as on resuming a run; Hopper's episodes end and reset within the
    steps (the reset noise comes from the restored RNG); Ant reads its torso's position
    as the last step left it.
    """
    env = GymAdapter(gym.make(name), seed=3)
    env.reset()
    rng = np.random.default_rng(0)
    space = env.gym_env.action_space
    draw = lambda: rng.uniform(space.low, space.high).astype(space.dtype)  # noqa: E731
    for _ in range(20):
        env.step(draw())
    state = env.get_state()
    actions = [draw() for _ in range(150)]
    expected = [env.step(a) for a in actions]
    restored = GymAdapter(gym.make(name), seed=99)
    restored.set_state(state)
    _assert_steps_as(restored, actions, expected)
    if name == "Hopper-v5":
        assert any(t.step_type == StepType.FIRST for t in expected)


class _ConstructorPickledEnv(gym.Env, gym.utils.EzPickle):
    """Pickles as its constructor's argument: its position would come back as 0."""

    observation_space = spaces.Box(-10.0, 10.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, start: float = 0.0):
        gym.utils.EzPickle.__init__(self, start)
        self.position = start

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([self.position], np.float32), {}

    def step(self, action):
        self.position += 1.0 if action else -1.0
        return np.array([self.position], np.float32), 0.0, False, False, {}


def test_the_state_of_an_env_pickled_as_its_constructor_arguments_is_refused():
    env = GymAdapter(gym.wrappers.TimeLimit(_ConstructorPickledEnv(), 10), seed=0)
    env.reset()
    env.step(np.int64(1))
    with pytest.raises(TypeError, match="_ConstructorPickledEnv pickles as its constructor"):
        env.get_state()
