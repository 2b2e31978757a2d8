"""The environment contract suite on every back end, and the Must-show episode ends.

Every back end (serial, thread, parallel; tensor where cadence has one; vector
where the id registers a Gymnasium vector env) runs CartPole-v1, Pendulum-v1,
Hopper-v5 (MuJoCo), an env with ``Dict`` observations and actions, and an image env
behind Gymnasium wrappers.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from cadence.data.time_step import StepType
from cadence.envs import EnvFrameStack, ImageChannelFirst, make_env
from cadence.envs.make import has_vector_env
from cadence.envs.tensor import has_tensor_env
from cadence.testing import DictObservationEnv, ImageEnv, check_environment

BACKENDS = ["serial", "thread", "parallel", "vector", "tensor"]
NUM_ENVS = 3
NUM_STEPS = 210  # past Pendulum's 200-step limit

ENVS: dict[str, dict[str, Any]] = {
    "CartPole-v1": {"name": "CartPole-v1"},
    "Pendulum-v1": {"name": "Pendulum-v1"},
    # Random actions make the hopper fall within a few dozen steps; the limit adds truncations.
    "Hopper-v5": {"name": "Hopper-v5", "max_episode_steps": 40},
    "dict": {"name": DictObservationEnv},
    "image": {
        "name": ImageEnv,
        "gym_wrappers": [ImageChannelFirst, functools.partial(EnvFrameStack, num_stack=2, axis=0)],
    },
}


def _has(backend: str, name: Any) -> bool:
    """Whether ``backend`` runs env ``name`` (tensor and vector need an implementation)."""
    if backend == "tensor":
        return isinstance(name, str) and has_tensor_env(name)
    if backend == "vector":
        return has_vector_env(name)
    return True


def _backends(env: str) -> list[str]:
    return [backend for backend in BACKENDS if _has(backend, ENVS[env]["name"])]


def _cases() -> list[Any]:
    return [
        pytest.param(backend, env, id=f"{backend}-{env}")
        for backend in BACKENDS
        for env in ENVS
        if _has(backend, ENVS[env]["name"])
    ]


def _maker(backend: str, env: str):
    kwargs = dict(ENVS[env])
    name = kwargs.pop("name")
    return lambda seed: make_env(name, NUM_ENVS, backend, seed, **kwargs)


@pytest.mark.parametrize(("backend", "env"), _cases())
def test_contract(backend: str, env: str):
    report = check_environment(_maker(backend, env), seed=3, num_steps=NUM_STEPS)
    assert report.batch_size == NUM_ENVS
    assert report.episodes >= NUM_ENVS  # every row finished at least one episode
    if env in ("Pendulum-v1", "Hopper-v5", "dict", "image"):
        assert report.truncations > 0
    if env != "Pendulum-v1":  # a pendulum never terminates
        assert report.terminations > 0


@pytest.mark.parametrize("backend", _backends("Pendulum-v1"))
def test_pendulum_ends_last_with_discount_one_at_step_200(backend: str):
    with make_env("Pendulum-v1", 2, backend, seed=0) as env:
        time_step = env.reset()
        generator = torch.Generator().manual_seed(0)
        for t in range(1, 201):
            time_step = env.step(env.action_spec.sample((2,), generator))
            expected = StepType.LAST if t == 200 else StepType.MID
            assert time_step.step_type.tolist() == [expected] * 2, f"step {t}"
        assert time_step.discount.tolist() == [1.0, 1.0]
        after = env.step(env.action_spec.sample((2,), generator))
        assert after.step_type.tolist() == [StepType.FIRST] * 2
        assert after.discount.tolist() == [1.0, 1.0]
        assert torch.all(after.prev_action == 0)


@pytest.mark.parametrize("backend", _backends("CartPole-v1"))
def test_cartpole_pole_fall_ends_last_with_discount_zero(backend: str):
    with make_env("CartPole-v1", 2, backend, seed=0) as env:
        env.reset()
        push_right = torch.ones(2, dtype=torch.int64)
        previous_last = torch.zeros(2, dtype=torch.bool)
        falls = torch.zeros(2, dtype=torch.int64)
        for t in range(60):  # always pushing one way, the pole falls within ~10 steps
            time_step = env.step(push_right)
            assert torch.equal(time_step.is_first(), previous_last), f"step {t}: FIRST after LAST"
            assert torch.all(time_step.prev_action[previous_last] == 0)
            last = time_step.is_last()
            assert torch.all(time_step.discount[last] == 0.0), f"step {t}: a fall has discount 0"
            falls += last
            previous_last = last
        assert torch.all(falls >= 2), f"falls per env: {falls.tolist()}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    ("backend", "env"),
    [
        ("tensor", "CartPole-v1"),
        ("tensor", "Pendulum-v1"),
        ("serial", "dict"),
        ("parallel", "image"),
    ],
)
def test_contract_on_a_cuda_device(backend: str, env: str):
    kwargs = dict(ENVS[env])
    name = kwargs.pop("name")

    def make(seed: int):
        return make_env(name, NUM_ENVS, backend, seed, device="cuda", **kwargs)

    report = check_environment(make, seed=3, num_steps=NUM_STEPS)
    assert report.episodes >= NUM_ENVS
