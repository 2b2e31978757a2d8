"""`make_env`: ids, back ends, seeding and the options that reach every env."""

from __future__ import annotations

import functools
import json
import sys

import gymnasium as gym
import numpy as np
import pytest

from cadence import machine_record
from cadence.data.time_step import StepType
from cadence.envs import (
    EnvBuildError,
    EnvFrameStack,
    EnvStateMismatchError,
    FrameSkip,
    GymEnvFactory,
    ImageChannelFirst,
    ParallelEnvironment,
    SerialEnvironment,
    ThreadEnvironment,
    UnknownEnvironmentError,
    backend_choice,
    make_env,
)
from cadence.envs.config import EnvConfig
from cadence.envs.env_state import loads_env_state
from cadence.envs.make import check_env
from cadence.envs.tensor import TensorEnvironment
from cadence.envs.vector import VectorEnvironment
from cadence.testing import ImageEnv


def test_an_unknown_id_is_named_with_close_registered_ids():
    with pytest.raises(UnknownEnvironmentError) as error:
        make_env("CartPol-v1")
    message = str(error.value)
    assert "'CartPol-v1'" in message
    assert "Did you mean" in message and "CartPole-v1" in message


def test_an_unknown_id_with_nothing_close_is_still_named():
    with pytest.raises(UnknownEnvironmentError, match="'Zzzqqq-v9'"):
        make_env("Zzzqqq-v9")


def test_tensor_backend_without_a_tensor_env_says_so():
    with pytest.raises(ValueError) as error:
        make_env("Hopper-v5", backend="tensor")
    message = str(error.value)
    assert "No tensor-native implementation of 'Hopper-v5'" in message
    assert "CartPole-v1" in message and "Pendulum-v1" in message  # what there is
    assert "backend='serial'" in message  # what to do instead


def test_tensor_backend_refuses_gym_wrappers():
    with pytest.raises(ValueError, match="cannot apply Gymnasium wrappers"):
        make_env(
            "CartPole-v1",
            backend="tensor",
            gym_wrappers=[functools.partial(EnvFrameStack, num_stack=2)],
        )


def test_refuses_a_bad_backend_and_batch_size():
    with pytest.raises(ValueError, match="backend must be one of"):
        make_env("CartPole-v1", backend="gpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        make_env("CartPole-v1", num_envs=0)


@pytest.mark.parametrize("backend", ["serial", "thread", "parallel"])
def test_env_i_is_seeded_seed_plus_i(backend):
    with make_env("CartPole-v1", 3, backend, seed=5) as env:
        observation = env.reset().observation.numpy()
    for i in range(3):
        expected, _ = gym.make("CartPole-v1").reset(seed=5 + i)
        np.testing.assert_array_equal(observation[i], expected)


def test_the_same_seed_gives_the_same_seeds_in_the_same_order():
    def first_observations(seed: int):
        with make_env("Pendulum-v1", 4, "serial", seed=seed) as env:
            return env.reset().observation

    assert first_observations(11).equal(first_observations(11))
    assert not first_observations(12).equal(first_observations(11))


@pytest.mark.parametrize(
    ("backend", "cls"),
    [
        ("serial", SerialEnvironment),
        ("thread", ThreadEnvironment),
        ("parallel", ParallelEnvironment),
        ("vector", VectorEnvironment),
        ("tensor", TensorEnvironment),
    ],
)
def test_each_backend_builds_its_class(backend, cls):
    with make_env("CartPole-v1", 2, backend) as env:
        assert isinstance(env, cls)
        assert env.batch_size == 2


def test_auto_prefers_the_tensor_env_for_large_batches_and_falls_back_without_one():
    with make_env("CartPole-v1", 64) as env:
        assert isinstance(env, TensorEnvironment)
    with make_env("CartPole-v1", 2) as env:  # on a CPU, Gymnasium's NumPy vector CartPole
        assert isinstance(env, VectorEnvironment)
    with make_env("Pendulum-v1", 2) as env:  # no vector env: one by one is faster on a CPU
        assert isinstance(env, SerialEnvironment)
    with make_env(
        "Pendulum-v1", 1, gym_wrappers=[functools.partial(EnvFrameStack, num_stack=2)]
    ) as env:
        assert isinstance(
            env, SerialEnvironment
        )  # wrappers need Gymnasium; one env needs no worker
        assert tuple(env.observation_spec.shape) == (2, 3)


def test_auto_measures_an_envs_step_cost_once_per_machine(unmeasured_machine, monkeypatch):
    """The choice between serial and parallel decides the learner's thread count, hence a
    run's numbers: a later run must read the first one's measurement, not time again."""
    costs = iter([1e-3, 1e-7])  # slow enough for workers, then (another time) cheap
    measured = []

    def step_cost(factory):
        measured.append(factory.name)
        return next(costs)

    monkeypatch.setattr(backend_choice, "_step_cost", step_cost)
    monkeypatch.setattr(backend_choice.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    frame_skip = [functools.partial(FrameSkip, skip=2)]
    factory = GymEnvFactory("Pendulum-v1", 0, 0, gym_wrappers=frame_skip)
    assert backend_choice.pick_cpu_backend(factory, 2) == "parallel"
    assert backend_choice.pick_cpu_backend(factory, 2) == "parallel"  # read back, not 1e-7
    assert backend_choice.pick_cpu_backend(factory, 1) == "serial"  # one env needs no worker
    assert measured == ["Pendulum-v1"]
    path = machine_record.record_directory() / backend_choice.STEP_COST_RECORD
    [(key, cost)] = json.loads(path.read_text()).items()
    assert key.endswith("Pendulum-v1 cadence.envs.wrappers.FrameSkip((), [('skip', 2)])")
    assert cost == 1e-3
    # An env with no name across processes is timed each time, and not recorded.
    lambda_factory = GymEnvFactory(lambda: gym.make("Pendulum-v1"), 0, 0)
    assert backend_choice.pick_cpu_backend(lambda_factory, 2) == "serial"
    assert len(measured) == 2 and len(json.loads(path.read_text())) == 1


def test_a_scripts_env_class_is_recorded_by_the_scripts_file(monkeypatch):
    monkeypatch.setattr(ImageEnv, "__module__", "__main__")
    monkeypatch.setattr(sys.modules["__main__"], "__file__", "/work/train.py", raising=False)
    assert backend_choice._qualified_name(ImageEnv) == "/work/train.py.ImageEnv"
    monkeypatch.delattr(sys.modules["__main__"], "__file__")
    assert backend_choice._qualified_name(ImageEnv) is None  # a notebook's: timed in every run


def test_a_callable_with_env_kwargs_and_wrappers_in_order():
    wrappers = [ImageChannelFirst, functools.partial(EnvFrameStack, num_stack=3, axis=0)]
    with make_env(ImageEnv, 2, "serial", gym_wrappers=wrappers, env_kwargs={"size": 8}) as env:
        assert tuple(env.observation_spec.shape) == (9, 8, 8)  # channel-first, then stacked
        assert tuple(env.reset().observation.shape) == (2, 9, 8, 8)


def test_max_episode_steps_cuts_episodes_with_discount_one():
    with make_env("CartPole-v1", 2, "serial", max_episode_steps=3) as env:
        env.reset()
        action = env.action_spec.zeros((2,))
        steps = [env.step(action) for _ in range(4)]
    assert [int(s.step_type[0]) for s in steps] == [
        StepType.MID,
        StepType.MID,
        StepType.LAST,
        StepType.FIRST,
    ]
    assert steps[2].discount.tolist() == [1.0, 1.0]


# ---------------------------------------------------------------------------------------
# "prefer_tensor": the tensor-native env where there is one, else Gymnasium.


def test_prefer_tensor_is_the_tensor_env_where_there_is_one_else_gymnasium():
    with make_env("CartPole-v1", 2, "prefer_tensor") as env:
        assert isinstance(env, TensorEnvironment)  # even for a batch "auto" steps serially
    with make_env("MountainCarContinuous-v0", 2, "prefer_tensor") as env:
        assert isinstance(env, SerialEnvironment | ParallelEnvironment)
        assert tuple(env.reset().observation.shape) == (2, 2)
    # Wrappers need Gymnasium: the same id, then, is not tensor-native.
    with make_env(
        "Pendulum-v1", 2, "prefer_tensor", gym_wrappers=[functools.partial(FrameSkip, skip=2)]
    ) as env:
        assert isinstance(env, SerialEnvironment | ParallelEnvironment)


def test_prefer_tensor_takes_wrappers_where_tensor_refuses_them():
    wrappers = [{"name": "FrameSkip", "skip": 2}]
    assert EnvConfig(name="CartPole-v1", backend="prefer_tensor", wrappers=wrappers).wrappers
    with pytest.raises(ValueError, match="cannot apply env.wrappers; use backend 'prefer_tensor'"):
        EnvConfig(name="CartPole-v1", backend="tensor", wrappers=wrappers)


# ---------------------------------------------------------------------------------------
# check_env: every reason an env cannot be built is an EnvBuildError with one clear message.


class _RaisesInItsConstructor(gym.Env):
    def __init__(self):
        raise RuntimeError("no simulator licence")


class _NeedsAMissingPackage(gym.Env):
    def __init__(self):
        raise gym.error.DependencyNotInstalled(
            'Box9D is not installed, run `pip install "gymnasium[box9d]"`'
        )


@pytest.fixture
def broken_env_ids():
    ids = {
        "cadence_test/Raises-v0": _RaisesInItsConstructor,
        "cadence_test/NeedsBox9D-v0": _NeedsAMissingPackage,
    }
    for env_id, entry_point in ids.items():
        gym.register(id=env_id, entry_point=entry_point)
    yield list(ids)
    for env_id in ids:
        del gym.registry[env_id]


def test_check_env_passes_an_env_that_builds():
    check_env("Pendulum-v1", "prefer_tensor")
    check_env("MountainCarContinuous-v0", "prefer_tensor", max_episode_steps=5)
    check_env("CartPole-v1", "parallel", gym_wrappers=[functools.partial(FrameSkip, skip=2)])


def test_check_env_names_an_unknown_id_and_close_ones():
    with pytest.raises(UnknownEnvironmentError, match="Did you mean: Pendulum-v1"):
        check_env("Pendulm-v1")
    assert issubclass(UnknownEnvironmentError, EnvBuildError)


def test_check_env_names_a_module_that_does_not_import():
    with pytest.raises(EnvBuildError) as error:
        check_env("cadence_no_such_module:Foo-v0")
    message = str(error.value)
    assert "'cadence_no_such_module:Foo-v0'" in message
    assert "No module named 'cadence_no_such_module'" in message


def test_check_env_names_an_id_its_module_does_not_register():
    with pytest.raises(UnknownEnvironmentError, match="'NoSuchEnv-v0'"):
        check_env("gymnasium:NoSuchEnv-v0")


def test_check_env_keeps_the_install_hint_of_a_missing_dependency(broken_env_ids):
    with pytest.raises(EnvBuildError) as error:
        check_env("cadence_test/NeedsBox9D-v0", "parallel")
    message = str(error.value)
    assert "needs a package that is not installed" in message
    assert 'pip install "gymnasium[box9d]"' in message


def test_check_env_reports_an_env_that_raises_while_built(broken_env_ids):
    with pytest.raises(EnvBuildError, match="RuntimeError: no simulator licence"):
        check_env("cadence_test/Raises-v0", "prefer_tensor")
    with pytest.raises(EnvBuildError, match="TypeError"):  # an option the env does not take
        check_env("Pendulum-v1", "prefer_tensor", env_kwargs={"no_such_option": 1})


def _an_assertion_in_gymnasium_robotics():
    """A function whose frame reads as Gymnasium-Robotics' own (its module's __name__)."""
    namespace = {"__name__": "gymnasium_robotics.utils.mujoco_utils"}
    exec("def set_joint_qpos():\n    assert False\n", namespace)
    namespace["set_joint_qpos"]()


class _FetchOnANewerMujoco(gym.Env):
    def __init__(self):
        _an_assertion_in_gymnasium_robotics()


@pytest.mark.parametrize(("version", "hinted"), [("3.17.0", True), ("3.11.0", False)])
def test_check_env_says_which_mujoco_gymnasium_robotics_needs(monkeypatch, version, hinted):
    mujoco = pytest.importorskip("mujoco")
    monkeypatch.setattr(mujoco, "__version__", version)
    gym.register(id="cadence_test/Fetch-v0", entry_point=_FetchOnANewerMujoco)
    try:
        with pytest.raises(EnvBuildError, match="AssertionError") as error:
            check_env("cadence_test/Fetch-v0", "serial")
    finally:
        del gym.registry["cadence_test/Fetch-v0"]
    assert ("pip install 'mujoco<3.12'" in str(error.value)) == hinted


def test_check_env_refuses_tensor_for_an_env_without_one():
    with pytest.raises(EnvBuildError, match="No tensor-native implementation of 'Acrobot-v1'"):
        check_env("Acrobot-v1", "tensor")


# ---------------------------------------------------------------------------------------
# An env state saved by one kind of back end, loaded by another: a clear error, no TypeError.


def _state(backend: str, **kwargs):
    with make_env("CartPole-v1", 2, backend, seed=0, **kwargs) as env:
        env.reset()
        return env.get_state()


@pytest.mark.parametrize(
    ("saved_by", "loaded_by", "match"),
    [
        ("tensor", "serial", "saved by a tensor-native env"),
        ("tensor", "thread", "saved by a tensor-native env"),
        ("tensor", "parallel", "saved by a tensor-native env"),
        ("serial", "tensor", "saved by a Gymnasium back end"),
    ],
)
def test_a_state_of_another_kind_of_back_end_is_refused_clearly(saved_by, loaded_by, match):
    state = _state(saved_by)
    with make_env("CartPole-v1", 2, loaded_by, seed=0) as env:
        with pytest.raises(EnvStateMismatchError, match=match):
            env.set_state(state)
        env.reset()  # still usable: nothing was restored


def test_a_state_of_another_env_stack_is_refused_clearly():
    with_limit, without_limit = _state("serial", max_episode_steps=10), _state("serial")
    with make_env("CartPole-v1", 2, "serial", seed=0) as env:
        with pytest.raises(EnvStateMismatchError, match="not a Gymnasium env's pickled state"):
            env.set_state(with_limit)
    with make_env("CartPole-v1", 2, "serial", seed=0, max_episode_steps=10) as env:
        with pytest.raises(EnvStateMismatchError, match="not saved by a TimeLimit"):
            env.set_state(without_limit)
    with pytest.raises(EnvStateMismatchError, match="the env state is a dict"):
        loads_env_state({"state": None}, gym.make("CartPole-v1"))
