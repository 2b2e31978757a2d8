"""PPO and A2C with a recurrent core (``network.recurrent``): the state resets at FIRST in
the training sequences as it did while acting, BPTT stays within an episode, minibatches
are whole env sequences, and both algorithms learn a task that needs memory."""

from __future__ import annotations

import functools

import pytest
import torch
from bandits import DelayedCue  # tests/algorithms/bandits.py

from cadence.algorithms.a2c import A2CConfig, make_a2c
from cadence.algorithms.actor_critic_network import RecurrentActorCriticNetwork
from cadence.algorithms.on_policy import OnPolicySchedule, OnPolicyScheme
from cadence.algorithms.ppo import PPOConfig, make_ppo
from cadence.collect import Collector
from cadence.config import ConfigError, load_config
from cadence.data.experience import Experience
from cadence.data.specs import DiscreteTensorSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs import make_env
from cadence.trainer.evaluation import evaluate_episodes

F, M, L = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
VECTOR = TensorSpec((3,))
TWO_ACTIONS = DiscreteTensorSpec((), torch.int64, 2)


def _network(kind="gru", share_encoder=False, hidden_sizes=(16,)):
    from cadence.networks import NetworkConfig

    return NetworkConfig(
        recurrent=kind, recurrent_size=8, hidden_sizes=hidden_sizes, share_encoder=share_encoder
    )


def _ppo(kind="gru", share_encoder=False, **config):
    return make_ppo(PPOConfig(**config), VECTOR, TWO_ACTIONS, _network(kind, share_encoder))


# [T + 1 = 6, B = 2]. Env 0 starts an episode at t = 0, ends it (LAST) at t = 2 and
# starts the next at t = 3; env 1 is in the middle of an episode the whole unroll,
# carrying a state from the previous one.
STEP_TYPES = [[F, M], [M, M], [L, M], [F, M], [M, M], [M, M]]


def _experience(algorithm, seed=0):
    torch.manual_seed(seed)
    steps = torch.tensor(STEP_TYPES)
    time_step = TimeStep(
        step_type=steps,
        reward=torch.rand(steps.shape),
        discount=torch.where(steps == L, 0.0, 1.0),
        observation=torch.randn(6, 2, 3),
        prev_action=torch.zeros(steps.shape, dtype=torch.int64),
        env_id=torch.arange(2).expand(steps.shape),
    )
    initial = algorithm.initial_state(2)
    # Env 0's first step is FIRST, so the collector stored the initial state there.
    state0 = {
        core: {k: torch.where(torch.tensor([[True], [False]]), v, torch.randn_like(v))
               for k, v in core_state.items()}
        for core, core_state in initial.items()
    }  # fmt: skip
    actions = torch.randint(0, 2, (5, 2))
    state = {c: {k: v.expand(5, *v.shape) for k, v in s.items()} for c, s in state0.items()}
    info = {"action": actions, "log_prob": torch.full((5, 2), -0.69)}
    return Experience(time_step, actions, info, state=state)


def _stepped(network, observation, step_types, state):
    """The reference: the network stepped one time step at a time, as while acting, its
    state reset to zeros by hand at FIRST steps. Returns ``[T, B]`` values and logits."""
    values, logits = [], []
    for t in range(observation.shape[0]):
        first = step_types[t] == F
        state = {
            c: {k: torch.where(first[:, None], 0.0, v) for k, v in s.items()}
            for c, s in state.items()
        }
        critic, _ = network.critic_core.step(
            network.critic_encoder(observation[t]), state["critic"]
        )
        values.append(network.critic(critic).squeeze(-1))
        distribution, state = network.step(observation[t], state)
        logits.append(distribution.logits)
    return torch.stack(values), torch.stack(logits)


def test_training_sequences_reset_the_state_at_first_as_acting_did():
    algorithm = _ppo(gamma=0.9, gae_lambda=0.8)
    experience = _experience(algorithm)
    batch = algorithm.preprocess_experience(experience)
    assert batch["observation"].shape == (2, 5, 3) and batch["step_type"].shape == (2, 5)
    assert set(batch["initial_state"]) == {"actor", "critic"}
    assert batch["initial_state"]["actor"]["h"].shape == (2, 8)
    steps = torch.tensor(STEP_TYPES)
    with torch.no_grad():
        values, logits = _stepped(
            algorithm.network, experience.time_step.observation, steps, experience.initial_state
        )
    torch.testing.assert_close(batch["old_value"], values[:-1].T)
    step = algorithm.train_step(batch, batch["initial_state"])
    # The LAST step of env 0 (t = 2) is left out of the loss: 10 - 1 samples.
    valid = (steps[:-1] != L).T
    assert step.info["log_prob"].shape == (9,)
    log_probs = torch.distributions.Categorical(logits=logits[:-1]).log_prob(experience.action)
    torch.testing.assert_close(step.info["log_prob"], log_probs.T[valid])
    torch.testing.assert_close(step.info["value"], values[:-1].T[valid])


def test_what_follows_a_first_does_not_depend_on_the_episode_before_it():
    algorithm = _ppo()
    experience = _experience(algorithm)
    batch = algorithm.preprocess_experience(experience)
    changed = dict(batch, observation=batch["observation"].clone())
    changed["observation"][0, :3] += 5.0  # env 0's first episode (t = 0..2)
    with torch.no_grad():
        before = algorithm.train_step(batch, batch["initial_state"]).info["log_prob"]
        after = algorithm.train_step(changed, changed["initial_state"]).info["log_prob"]
    # Env 0's samples are t = 0, 1, 3, 4 (t = 2 is LAST), then env 1's five.
    assert not torch.allclose(before[:2], after[:2])
    torch.testing.assert_close(before[2:], after[2:])
    # Env 1's carried initial state does matter for all its steps.
    other = {c: {k: v.clone() for k, v in s.items()} for c, s in batch["initial_state"].items()}
    other["actor"]["h"][1] += 1.0
    with torch.no_grad():
        moved = algorithm.train_step(batch, other).info["log_prob"]
    torch.testing.assert_close(moved[:4], before[:4])
    assert (moved[4:] - before[4:]).abs().min() > 0


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_bptt_reaches_earlier_steps_of_the_episode_and_stops_at_first(kind):
    algorithm = _ppo(kind)
    batch = algorithm.preprocess_experience(_experience(algorithm))
    observation = batch["observation"].clone().requires_grad_()
    first = batch["step_type"] == F
    distribution, value = algorithm.network.unroll(observation, first, batch["initial_state"])
    # Env 0, t = 4: its episode began at t = 3.
    (grad,) = torch.autograd.grad(distribution.log_prob(batch["action"])[0, 4], observation)
    per_step = grad[0].abs().sum(-1)
    assert (per_step[3:5] > 0).all() and (per_step[:3] == 0).all()
    (grad,) = torch.autograd.grad(value[1, 4], observation)  # env 1: no FIRST in the unroll
    assert (grad[1].abs().sum(-1) > 0).all() and (grad[0] == 0).all()


def _masked_cartpole(num_envs, seed):
    from cadence.envs.wrapper_config import gym_wrappers

    wrappers = gym_wrappers([{"name": "ObservationMask", "keep": [0, 2]}])
    return make_env("CartPole-v1", num_envs, "serial", seed=seed, gym_wrappers=wrappers)


@pytest.mark.parametrize(("kind", "share_encoder"), [("gru", False), ("lstm", True)])
def test_training_recomputes_the_rollout_policy_exactly(kind, share_encoder):
    # Episodes of a fresh policy end within ~30 steps: several per env per unroll,
    # and the second unroll starts from the state the first one left.
    torch.manual_seed(0)
    env = _masked_cartpole(3, seed=0)
    algorithm = make_ppo(
        PPOConfig(), env.observation_spec, env.action_spec, _network(kind, share_encoder)
    )
    collector = Collector(env, algorithm, unroll_length=50)
    try:
        collector.unroll()
        experience, _ = collector.unroll()
    finally:
        env.close()
    step_type = experience.time_step.step_type[:-1]
    assert (step_type[1:] == F).any() and (step_type[0] != F).any()
    batch = algorithm.preprocess_experience(experience)
    with torch.no_grad():
        info = algorithm.train_step(batch, batch["initial_state"]).info
    # The first pass's ratio is 1: the sequences reproduce the policy that acted.
    torch.testing.assert_close(info["log_prob"], info["old_log_prob"], atol=1e-5, rtol=0)


def test_minibatches_are_whole_env_sequences_from_their_stored_state():
    torch.manual_seed(0)
    env = _masked_cartpole(4, seed=1)
    algorithm = make_ppo(PPOConfig(), env.observation_spec, env.action_spec, _network())
    schedule = OnPolicySchedule(num_updates_per_train_iter=2, mini_batch_size=2)  # sequences
    collector = Collector(env, algorithm, unroll_length=12)
    seen = []
    train_step = algorithm.train_step

    def recording(inputs, state):
        seen.append((inputs["observation"].shape, state["actor"]["h"].shape))
        return train_step(inputs, state)

    algorithm.train_step = recording
    try:
        metrics = OnPolicyScheme(algorithm, collector, schedule).train_iter().metrics
    finally:
        env.close()
    assert metrics["train/num_updates"] == 4  # 2 passes x 2 minibatches of 2 sequences
    assert seen == [(torch.Size([2, 12, 2]), torch.Size([2, 8]))] * 4


ONE_PASS = OnPolicySchedule()  # A2C's: one update on the whole unroll


def _train_on_delayed_cue(make, config, kind, iterations, schedule=ONE_PASS):
    torch.manual_seed(0)
    env = make_env(functools.partial(DelayedCue, delay=2), 8, "serial", seed=0)
    eval_env = make_env(functools.partial(DelayedCue, delay=2), 16, "serial", seed=100)
    try:
        network = _network(kind, hidden_sizes=(32,))
        algorithm = make(config, env.observation_spec, env.action_spec, network)
        collector = Collector(env, algorithm, unroll_length=12)
        scheme = OnPolicyScheme(algorithm, collector, schedule)
        for _ in range(iterations):
            scheme.train_iter()
        return evaluate_episodes(algorithm, eval_env)["return"]
    finally:
        env.close()
        eval_env.close()


# Seeds 0-3 remembered the cue in every eval episode after 5-10 iterations (PPO) and
# 10-15 (A2C).
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_ppo_remembers_a_cue(kind):
    config = PPOConfig(learning_rate=1e-2, lr_schedule="constant", gamma=0.9)
    schedule = OnPolicySchedule(num_updates_per_train_iter=4, mini_batch_size=4)
    returns = _train_on_delayed_cue(make_ppo, config, kind, 20, schedule)
    assert returns.min().item() == 1.0, returns  # without memory: 0.5 on average


def test_a2c_remembers_a_cue():
    config = A2CConfig(learning_rate=1e-2, optimizer="adam", gamma=0.9, normalize_advantages=True)
    returns = _train_on_delayed_cue(make_a2c, config, "gru", iterations=40)
    assert returns.min().item() == 1.0, returns


def test_a2c_and_ppo_build_the_recurrent_network_from_the_config():
    for make, config in ((make_ppo, PPOConfig()), (make_a2c, A2CConfig())):
        algorithm = make(config, VECTOR, TWO_ACTIONS, _network("lstm", share_encoder=True))
        assert isinstance(algorithm.network, RecurrentActorCriticNetwork)
        state = algorithm.initial_state(5)
        assert set(state) == {"core"} and state["core"]["c"].shape == (5, 8)
        assert algorithm.network.actor_core is algorithm.network.critic_core


def test_the_config_refuses_a_recurrent_core_for_other_algorithms():
    with pytest.raises(ConfigError, match="sac takes no recurrent core"):
        load_config("sac_pendulum", ["network.recurrent=gru"])
    assert load_config("a2c_cartpole", ["network.recurrent=lstm"]).network.recurrent == "lstm"


def test_help_says_minibatches_count_sequences_for_a_recurrent_policy():
    from cadence.config import config_help

    lines = config_help("ppo_cartpole_masked_gru").splitlines()
    index = lines.index("  algorithm.mini_batch_size=8  (int)")
    assert "whole env sequences" in lines[index + 1]
    assert "  network.recurrent=gru  ({'none', 'gru', 'lstm'})" in lines
