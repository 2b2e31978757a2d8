"""PPO, A2C and SAC as agents (``as_agent()``): collected through the Batcher, their actions
are the algorithm's own `rollout_step`'s (the same torch draws where they sample) and, in
deterministic slots, its `predict_step`'s; a recurrent PPO's state travels as agent_state."""

from __future__ import annotations

import copy
import typing

import pytest
import torch

from cadence.algorithms.a2c import A2CConfig, make_a2c
from cadence.algorithms.agent_view import AlgorithmAgent
from cadence.algorithms.algorithm import Algorithm, reset_state
from cadence.algorithms.ppo import PPOConfig, make_ppo
from cadence.algorithms.registry import (
    BUILTIN_ALGORITHMS,
    agent_view_algorithms,
    algorithm_builder,
    algorithm_capabilities,
)
from cadence.algorithms.sac import SACConfig, make_sac
from cadence.collect import Batcher, make_gym_env
from cadence.data import DictTensor
from cadence.data.nest import flatten_with_paths
from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.networks import NetworkConfig

pytestmark = pytest.mark.timeout(120)

SEED = 5
DETERMINISTIC = torch.tensor([False, True, False])


def _cartpole(make, config, network):
    return make(config, TensorSpec((4,)), DiscreteTensorSpec((), torch.int64, 2), network)


ALGORITHMS = {
    "a2c": lambda: (_cartpole(make_a2c, A2CConfig(), NetworkConfig()), "CartPole-v1"),
    "ppo_gru": lambda: (
        _cartpole(make_ppo, PPOConfig(), NetworkConfig(recurrent="gru", recurrent_size=8)),
        "CartPole-v1",
    ),
    "sac": lambda: (
        make_sac(
            SACConfig(),
            TensorSpec((3,)),
            BoundedTensorSpec((1,), minimum=-2.0, maximum=2.0),
            NetworkConfig(),
        ),
        "Pendulum-v1",
    ),
}


def _collect(algorithm, env_name):
    with Batcher(
        n_timesteps=12,
        n_processes=1,
        n_envs=3,
        create_env=make_gym_env,
        env_args={"name": env_name, "max_episode_steps": 8},  # an episode ends within each
        create_agent=algorithm.as_agent,
        seed=SEED,
        agent_info=DictTensor({"deterministic": torch.zeros(1, dtype=torch.bool)}),
    ) as batcher:
        batcher.reset(DictTensor({"deterministic": DETERMINISTIC}))
        acquisitions = []
        for _ in range(2):
            batcher.execute()
            acquisitions.append(batcher.get()[0])
    return acquisitions


def _time_step(steps, t):
    return TimeStep(
        step_type=steps["observation/step_type"][:, t],
        reward=steps["observation/reward"][:, t],
        discount=steps["observation/discount"][:, t],
        observation=steps["observation/frame"][:, t],
        prev_action=steps["observation/last_action"][:, t],
        env_id=steps["observation/env_id"][:, t],
    )


@pytest.fixture
def one_thread():
    """One torch thread, as a Batcher worker computes (to the last bit), then as before."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_an_algorithm_collects_through_the_batcher_as_its_own_rollout_step_would(name, one_thread):
    algorithm, env_name = ALGORITHMS[name]()
    acquisitions = _collect(algorithm, env_name)

    torch.manual_seed(SEED)  # a worker's draws start from seed + its first env's index (0)
    initial = algorithm.initial_state(3)
    state = initial
    with torch.no_grad():
        for trajectories in acquisitions:
            steps = trajectories.trajectories
            assert steps.full()
            stored = dict(flatten_with_paths(state))
            for key, value in stored.items():  # the state at the segment's start
                assert torch.allclose(trajectories.info[f"agent_state/{key}"], value), key
            for t in range(steps.n_steps()):
                time_step = _time_step(steps, t)
                state = reset_state(time_step.step_type, state, initial)
                mode = algorithm.predict_step(time_step, state).output
                step = algorithm.rollout_step(time_step, state, {"deterministic": DETERMINISTIC})
                acted = steps["action/action"][:, t]
                torch.testing.assert_close(acted, step.output, rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(acted[DETERMINISTIC], mode[DETERMINISTIC])
                for key, value in flatten_with_paths(step.info):
                    torch.testing.assert_close(steps[f"action/info/{key}"][:, t], value)
                state = step.state
    assert (steps["observation/step_type"] == StepType.FIRST).any()  # the state was reset
    if name == "ppo_gru":
        assert any(value.abs().sum() > 0 for _, value in flatten_with_paths(state))


def test_batcher_update_takes_the_algorithms_state_dict_and_the_workers_act_with_it(one_thread):
    algorithm = _cartpole(make_ppo, PPOConfig(), NetworkConfig())
    previous = copy.deepcopy(algorithm)
    greedy = DictTensor({"deterministic": torch.ones(4, dtype=torch.bool)})
    with Batcher(
        n_timesteps=8,
        n_processes=1,
        n_envs=4,
        create_env=make_gym_env,
        env_args={"name": "CartPole-v1"},
        create_agent=algorithm.as_agent,
        seed=SEED,
        agent_info=greedy,
    ) as batcher:
        batcher.reset(greedy)
        with torch.no_grad():
            for parameter in algorithm.parameters():
                parameter.add_(torch.randn_like(parameter))
        assert batcher.update(algorithm.state_dict()) == 1  # optim/* (a dict) stays behind
        batcher.execute()
        steps = batcher.get()[0].trajectories

    changed = False
    with torch.no_grad():
        for t in range(steps.n_steps()):
            time_step = _time_step(steps, t)
            acted = steps["action/action"][:, t]
            assert torch.equal(
                acted, algorithm.predict_step(time_step, algorithm.initial_state(4)).output
            )
            changed |= not torch.equal(
                acted, previous.predict_step(time_step, previous.initial_state(4)).output
            )
    assert changed  # the workers acted with the new weights, not those they started with


def test_an_algorithms_agent_loads_a_part_of_its_state_dict():
    source = _cartpole(make_ppo, PPOConfig(), NetworkConfig())
    target = _cartpole(make_ppo, PPOConfig(), NetworkConfig())
    optimizer_state = target.state_dict()["optim/actor_critic"]
    target.as_agent().update(dict(source.named_parameters()))  # no optim/*
    for (name, value), loaded in zip(source.named_parameters(), target.parameters(), strict=True):
        assert torch.equal(value, loaded), name
    assert target.state_dict()["optim/actor_critic"] == optimizer_state


@pytest.mark.parametrize("name", ["ppo_gru", "a2c", "sac"])
def test_an_algorithm_that_declares_an_agent_view_returns_its_agent(name):
    algorithm, _ = ALGORITHMS[name]()
    assert isinstance(algorithm.as_agent(), AlgorithmAgent)


def test_asking_for_the_agent_of_an_algorithm_that_declares_none_fails_naming_those_that_do():
    from cadence.algorithms.dqn import DQNConfig, make_dqn

    assert agent_view_algorithms() == ["ppo", "a2c", "sac"]
    dqn = _cartpole(make_dqn, DQNConfig(), NetworkConfig())
    with pytest.raises(NotImplementedError, match=r"DQNAlgorithm offers no agent.*ppo, a2c, sac"):
        dqn.as_agent()


def test_the_built_in_declarations_of_an_agent_view_match_the_classes():
    for name in BUILTIN_ALGORITHMS:
        kind = typing.get_type_hints(algorithm_builder(name))["return"]  # the class it builds
        writes_one = kind.as_agent is not Algorithm.as_agent
        assert algorithm_capabilities(name).agent_view == writes_one, name
