"""Collector: time-major unrolls that continue one another, episode stats, a policy
override, and a state that lets a rebuilt collector continue exactly."""

import io

import torch

from cadence.algorithms.algorithm import AlgStep
from cadence.algorithms.ppo import PPOConfig, make_ppo
from cadence.collect import Collector
from cadence.envs import make_env
from cadence.networks import NetworkConfig


def _collector(seed=0, unroll_length=5):
    torch.manual_seed(seed)
    env = make_env("CartPole-v1", 3, "serial", seed=seed)
    algorithm = make_ppo(PPOConfig(), env.observation_spec, env.action_spec, NetworkConfig())
    return Collector(env, algorithm, unroll_length)


def test_unrolls_are_time_major_and_continue_one_another():
    collector = _collector()
    try:
        first, _ = collector.unroll()
        second, _ = collector.unroll()
    finally:
        collector.env.close()
    assert first.time_step.step_type.shape == (6, 3)  # [T + 1, B]
    assert first.time_step.observation.shape == (6, 3, 4)
    assert first.action.shape == (5, 3) and first.info["log_prob"].shape == (5, 3)
    assert (first.time_step.step_type[0] == 0).all()  # the reset
    assert torch.equal(first.time_step.observation[-1], second.time_step.observation[0])
    assert torch.equal(second.time_step.prev_action[1], second.action[0])
    assert collector.num_env_steps_per_unroll == 15


def test_completed_episodes_are_reported_once():
    collector = _collector(unroll_length=100)
    try:
        experience, episodes = collector.unroll()
    finally:
        collector.env.close()
    num_last = int((experience.time_step.step_type[1:] == 2).sum())
    assert num_last > 0 and episodes["return"].numel() == num_last
    assert torch.equal(episodes["return"], episodes["length"].double())  # CartPole pays 1 a step


def test_a_policy_override_acts_instead_of_rollout_step():
    collector = _collector()

    def always_left(time_step, state, agent_info):
        return AlgStep(
            output=torch.zeros(3, dtype=torch.int64), state=state, info={"tag": torch.ones(3)}
        )

    try:
        experience, _ = collector.unroll(always_left)
    finally:
        collector.env.close()
    assert not experience.action.any() and experience.info["tag"].shape == (5, 3)


def test_state_dict_lets_a_rebuilt_collector_continue_exactly():
    original = _collector(seed=1)
    rebuilt = _collector(seed=1)
    try:
        original.unroll()
        buffer = io.BytesIO()
        torch.save({"collector": original.state_dict(), "env": original.env.get_state()}, buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
        rebuilt.env.set_state(state["env"])
        rebuilt.load_state_dict(state["collector"])
        rebuilt.algorithm.load_state_dict(original.algorithm.state_dict())
        rng = torch.get_rng_state()
        expected, expected_stats = original.unroll()
        torch.set_rng_state(rng)
        actual, actual_stats = rebuilt.unroll()
    finally:
        original.env.close()
        rebuilt.env.close()
    assert torch.equal(expected.time_step.observation, actual.time_step.observation)
    assert torch.equal(expected.action, actual.action)
    assert torch.equal(expected_stats["return"], actual_stats["return"])


def test_a_collector_acts_where_the_algorithms_parameters_are_unless_told():
    env = make_env("CartPole-v1", 3, "serial", seed=0)
    algorithm = make_ppo(PPOConfig(), env.observation_spec, env.action_spec, NetworkConfig())
    try:
        assert Collector(env, algorithm, 5).device == torch.device("cpu")
        # Any object with `initial_state` and `rollout_step` unrolls, on the CPU.
        duck = Collector(env, FixedPolicy(), 5)
        assert duck.device == torch.device("cpu")
        assert torch.equal(duck.unroll()[0].action, torch.zeros(5, 3, dtype=torch.int64))
        # A GPU learner's collector acts on the GPU (time steps are moved there); "meta"
        # stands in for it on a machine without one: nothing here runs on the device.
        algorithm.to("meta")
        collector = Collector(env, algorithm, 5)
        assert collector.device == collector.learner_device == torch.device("meta")
    finally:
        env.close()


class FixedPolicy:
    """Not a module: what `Collector` needs of an algorithm, and nothing else."""

    def initial_state(self, batch_size: int) -> tuple:
        return ()

    def rollout_step(self, time_step, state, agent_info=()) -> AlgStep:
        return AlgStep(output=torch.zeros(time_step.step_type.shape, dtype=torch.int64))
