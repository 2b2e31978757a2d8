"""ActorCriticAlgorithm: step functions, GAE preprocessing, optimizer state, and
learning a one-step bandit with PPO and A2C (discrete and continuous actions,
vector, image and Dict observations)."""

from __future__ import annotations

import functools
import io

import pytest
import torch
from bandits import ContextBandit  # tests/algorithms/bandits.py

from cadence.algorithms.a2c import A2CConfig, make_a2c
from cadence.algorithms.actor_critic import ActorCriticAlgorithm
from cadence.algorithms.algorithm import Algorithm, UpdateResult
from cadence.algorithms.build import build_algorithm
from cadence.algorithms.on_policy import OnPolicySchedule, OnPolicyScheme
from cadence.algorithms.ppo import PPOConfig, make_ppo
from cadence.algorithms.returns import generalized_advantage_estimation
from cadence.collect import Collector
from cadence.config import load_config
from cadence.data.errors import UnsupportedSpaceError
from cadence.data.experience import Experience
from cadence.data.specs import BoundedTensorSpec, CompositeSpec, DiscreteTensorSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs import make_env
from cadence.networks import NetworkConfig

F, M, L = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
NETWORK = NetworkConfig(hidden_sizes=(32,), cnn="small", share_encoder=True)


VECTOR = TensorSpec((3,))
TWO_ACTIONS = DiscreteTensorSpec((), torch.int64, 2)


def _ppo(observation_spec=VECTOR, action_spec=TWO_ACTIONS, **config):
    return make_ppo(PPOConfig(**config), observation_spec, action_spec, NETWORK)


def _time_steps(step_types, rewards, discounts, observations):
    steps = torch.tensor(step_types)
    return TimeStep(
        step_type=steps,
        reward=torch.tensor(rewards),
        discount=torch.tensor(discounts),
        observation=observations,
        prev_action=torch.zeros(steps.shape, dtype=torch.int64),
        env_id=torch.arange(steps.shape[1]).expand(steps.shape),
    )


def test_preprocess_drops_ignored_actions_and_matches_gae():
    torch.manual_seed(0)
    algorithm = _ppo(gamma=0.9, gae_lambda=0.8)
    # [T + 1 = 4, B = 2]; env 1 terminates at t = 1, env 0 is cut by a time limit at t = 2.
    time_step = _time_steps(
        [[F, F], [M, L], [L, F], [F, M]],
        [[0.0, 0.0], [1.0, 2.0], [3.0, 0.0], [0.0, 5.0]],
        [[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]],
        torch.randn(4, 2, 3),
    )
    actions = torch.tensor([[0, 1], [1, 0], [0, 1]])
    experience = Experience(time_step, actions, {"action": actions, "log_prob": torch.randn(3, 2)})
    batch = algorithm.preprocess_experience(experience)
    with torch.no_grad():
        value = algorithm.network.value(time_step.observation.flatten(0, 1)).reshape(4, 2)
    advantage = generalized_advantage_estimation(
        time_step.reward, time_step.discount, time_step.step_type, value, 0.9, 0.8
    )
    # Kept (t, b): every step but the two LAST ones (t=1, b=1) and (t=2, b=0), row-major.
    kept = [(0, 0), (0, 1), (1, 0), (2, 1)]
    assert batch["advantage"].tolist() == pytest.approx([advantage[t, b].item() for t, b in kept])
    assert batch["return"].tolist() == pytest.approx(
        [advantage[t, b].item() + value[t, b].item() for t, b in kept]
    )
    assert batch["action"].tolist() == [actions[t, b].item() for t, b in kept]
    assert torch.equal(
        batch["observation"], torch.stack([time_step.observation[t, b] for t, b in kept])
    )
    # By hand for env 0 at t = 1: the time-limit LAST at t = 2 bootstraps from its value.
    assert batch["advantage"][2].item() == pytest.approx(
        (3.0 + 0.9 * value[2, 0] - value[1, 0]).item(), abs=1e-5
    )


def test_rollout_explores_predict_takes_the_mode_and_continuous_actions_are_clipped():
    torch.manual_seed(0)
    spec = BoundedTensorSpec((1,), torch.float32, -1.0, 1.0)
    algorithm = _ppo(action_spec=spec)
    with torch.no_grad():
        algorithm.network.action_head.mean.bias.fill_(5.0)  # far outside the bounds
    time_step = _time_steps([[F] * 64], [[0.0] * 64], [[1.0] * 64], torch.zeros(1, 64, 3))[0]
    rollout = algorithm.rollout_step(time_step, ())
    raw = rollout.info["action"]
    assert raw.shape == (64, 1) and raw.std() > 0.5  # sampled with log std 0
    assert torch.equal(rollout.output, raw.clamp(-1.0, 1.0))
    distribution = algorithm.network.distribution(time_step.observation)
    assert torch.allclose(
        rollout.info["log_prob"], distribution.log_prob(raw)
    )  # of the unclipped action
    predicted = algorithm.predict_step(time_step, ())
    assert torch.equal(predicted.output, torch.ones(64, 1))  # mode 5 clipped to 1
    assert torch.equal(algorithm.predict_step(time_step, ()).output, predicted.output)


def test_the_continuous_entries_of_a_dict_action_are_clipped_and_the_rest_kept():
    torch.manual_seed(0)
    spec = CompositeSpec(
        {
            "pick": DiscreteTensorSpec((), nvec=3),
            "push": BoundedTensorSpec((1,), torch.float32, -1.0, 1.0),
            "free": TensorSpec((2,)),  # unbounded: not clipped
        }
    )
    algorithm = _ppo(action_spec=spec)
    with torch.no_grad():
        algorithm.network.action_head.parts["push"].mean.bias.fill_(5.0)
        algorithm.network.action_head.parts["free"].mean.bias.fill_(5.0)
    time_step = _time_steps([[F] * 64], [[0.0] * 64], [[1.0] * 64], torch.zeros(1, 64, 3))[0]
    rollout = algorithm.rollout_step(time_step, ())
    raw = rollout.info["action"]
    assert torch.equal(rollout.output["push"], raw["push"].clamp(-1.0, 1.0))
    assert raw["push"].max() > 1.0  # so some were clipped
    assert torch.equal(rollout.output["pick"], raw["pick"])
    assert torch.equal(rollout.output["free"], raw["free"])
    distribution = algorithm.network.distribution(time_step.observation)
    assert torch.allclose(rollout.info["log_prob"], distribution.log_prob(raw))
    deterministic = {"deterministic": torch.arange(64) % 2 == 0}  # the mode in even rows
    mixed = algorithm.rollout_step(time_step, (), deterministic).output
    assert torch.equal(mixed["push"][::2], torch.ones(32, 1))
    assert torch.equal(mixed["pick"][::2], distribution.mode["pick"][::2])


def test_linear_schedule_anneals_the_learning_rate():
    linear, constant = (
        _ppo(learning_rate=1e-3, lr_schedule="linear"),
        _ppo(learning_rate=1e-3, lr_schedule="constant"),
    )
    for algorithm in (linear, constant):
        algorithm.set_progress(0.25)
    assert linear.optimizers()["actor_critic"].param_groups[0]["lr"] == pytest.approx(7.5e-4)
    assert constant.optimizers()["actor_critic"].param_groups[0]["lr"] == pytest.approx(1e-3)
    linear.set_progress(1.5)
    assert linear.optimizers()["actor_critic"].param_groups[0]["lr"] == 0.0


def test_state_dict_holds_the_optimizer_and_continues_identically():
    torch.manual_seed(0)
    inputs = {
        "observation": torch.randn(16, 3),
        "action": torch.randint(0, 2, (16,)),
        "old_log_prob": torch.full((16,), -0.7),
        "advantage": torch.randn(16),
        "return": torch.randn(16),
        "old_value": torch.zeros(16),
    }

    def step(algorithm):
        info = algorithm.train_step(inputs, ()).info
        algorithm.minimize(algorithm.calc_loss(info).loss)

    first = _ppo()
    step(first)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)  # as a checkpoint does: no tensor shared with `first`
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert state["optim/actor_critic"]["state"], "Adam moments are part of the state"
    second = _ppo()
    second.load_state_dict(state)
    step(first)
    step(second)
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        if not name.startswith("optim/"):
            assert torch.equal(a, b), name


class _FixedSource:
    """Hands out the same unroll every time (an `ExperienceSource`)."""

    def __init__(self, experience):
        self.experience = experience
        self.num_env_steps_per_unroll = experience.unroll_length * experience.batch_size

    def unroll(self):
        return self.experience, {"return": torch.zeros(0), "length": torch.zeros(0)}


def _fixed_experience(num_steps=6, batch_size=4):
    torch.manual_seed(1)
    steps = [[M] * batch_size for _ in range(num_steps + 1)]
    time_step = _time_steps(
        steps,
        [[1.0] * batch_size] * (num_steps + 1),
        [[1.0] * batch_size] * (num_steps + 1),
        torch.randn(num_steps + 1, batch_size, 3),
    )
    actions = torch.randint(0, 2, (num_steps, batch_size))
    return Experience(
        time_step,
        actions,
        {"action": actions, "log_prob": torch.full((num_steps, batch_size), -0.69)},
    )


def _record_minibatches(algorithm):
    """Tags every sample with its index and records the indices each minibatch holds."""
    seen = []
    preprocess, train_step = algorithm.preprocess_experience, algorithm.train_step

    def tagged(experience):
        batch = preprocess(experience)
        batch["sample_id"] = torch.arange(batch["advantage"].shape[0])
        return batch

    def recording(inputs, state):
        seen.append(inputs["sample_id"].tolist())
        return train_step(inputs, state)

    algorithm.preprocess_experience, algorithm.train_step = tagged, recording
    return seen


def test_each_pass_visits_every_sample_once_in_minibatches():
    algorithm = _ppo()
    seen = _record_minibatches(algorithm)
    schedule = OnPolicySchedule(num_updates_per_train_iter=3, mini_batch_size=5)
    scheme = OnPolicyScheme(algorithm, _FixedSource(_fixed_experience()), schedule)
    metrics = scheme.train_iter().metrics
    assert metrics["train/num_updates"] == 3 * 5  # 24 samples: minibatches of 5, 5, 5, 5, 4
    for epoch in range(3):
        minibatches = seen[epoch * 5 : (epoch + 1) * 5]
        assert [len(m) for m in minibatches] == [5, 5, 5, 5, 4]
        assert sorted(i for m in minibatches for i in m) == list(range(24))
    assert seen[0] != seen[5], "each pass shuffles anew"
    assert {"loss/policy", "loss/value", "loss/entropy", "loss/total", "train/grad_norm"} <= set(
        metrics
    )


def test_target_kl_stops_the_passes_early():
    algorithm = _ppo(target_kl=1e-12, learning_rate=1e-2)
    schedule = OnPolicySchedule(num_updates_per_train_iter=4, mini_batch_size=8)
    scheme = OnPolicyScheme(algorithm, _FixedSource(_fixed_experience()), schedule)
    metrics = scheme.train_iter().metrics
    assert metrics["train/num_updates"] == 3  # one pass of 24 / 8, then the KL is over the target


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.ci_budget  # half a minute on a cold compile cache
def test_a_compiled_scheme_runs_several_updates_per_call_with_the_eager_minibatches():
    """With a compiled update the scheme runs its passes' updates several per compiled call
    (`OnPolicyScheme.updates_per_graph`, calls of nearly equal sizes): the same
    minibatches and parameters as the eager scheme's. Where ``target_kl`` may stop the
    passes, no call spans two of them."""

    def run(compile_mode, **config):
        torch.manual_seed(4)
        algorithm = _ppo(**config)
        from cadence.accel import compile_update

        compile_update(algorithm, compile_mode)
        calls = []
        one, many = algorithm.update_rows, algorithm.update_rows_many

        def one_recorded(batch, indices):
            calls.append([indices.tolist()])
            return one(batch, indices)

        def many_recorded(batch, indices):
            calls.append([rows.tolist() for rows in indices])
            return many(batch, indices)

        algorithm.update_rows, algorithm.update_rows_many = one_recorded, many_recorded
        torch.manual_seed(5)
        schedule = OnPolicySchedule(num_updates_per_train_iter=2, mini_batch_size=12)
        source = _FixedSource(_fixed_experience())
        scheme = OnPolicyScheme(algorithm, source, schedule, updates_per_graph=3)
        return algorithm, calls, scheme.train_iter().metrics

    eager, eager_calls, eager_metrics = run("off")
    graph, graph_calls, graph_metrics = run("default")
    assert [len(call) for call in eager_calls] == [1] * 4
    assert [len(call) for call in graph_calls] == [2, 2]  # 4 updates, at most 3 per call
    assert sum(graph_calls, []) == sum(eager_calls, [])
    assert graph_metrics["train/num_updates"] == eager_metrics["train/num_updates"] == 4
    for key, value in eager_metrics.items():
        assert graph_metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-5)
    for name, value in eager.state_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(graph.state_dict()[name], value, rtol=1e-4, atol=1e-5)

    _, stopping_calls, metrics = run("default", target_kl=1e-12, learning_rate=1e-2)
    assert [len(call) for call in stopping_calls] == [2]
    assert metrics["train/num_updates"] == 2


def test_a2c_takes_one_step_on_the_whole_unroll():
    algorithm = make_a2c(A2CConfig(), VECTOR, TWO_ACTIONS, NETWORK)
    seen = _record_minibatches(algorithm)
    metrics = OnPolicyScheme(algorithm, _FixedSource(_fixed_experience())).train_iter().metrics
    assert metrics["train/num_updates"] == 1 and [len(m) for m in seen] == [24]


ONE_PASS = OnPolicySchedule()  # A2C's: one update on the whole unroll


def _train_on_bandit(make, config, observation, action, iterations, schedule=ONE_PASS):
    torch.manual_seed(0)
    env = make_env(functools.partial(ContextBandit, observation, action), 8, "serial", seed=0)
    try:
        algorithm = make(config, env.observation_spec, env.action_spec, NETWORK)
        collector = Collector(env, algorithm, unroll_length=16)
        scheme = OnPolicyScheme(algorithm, collector, schedule)
        for _ in range(iterations):
            scheme.train_iter()
        time_step = env.reset()
        with torch.no_grad():
            time_step = env.step(algorithm.predict_step(time_step, ()).output)
        return time_step.reward
    finally:
        env.close()


# The image and Dict variants of each algorithm run a CNN: only one of them is in the fast set.
PPO_CASES = [
    ("vector", "discrete"),
    ("vector", "continuous"),
    ("vector", "multi_discrete"),
    ("vector", "multi_binary"),
    ("vector", "dict"),
    ("vector", "tuple"),
    ("image", "discrete"),
    pytest.param("image", "continuous", marks=pytest.mark.slow),
    pytest.param("dict", "discrete", marks=pytest.mark.slow),
    pytest.param("dict", "continuous", marks=pytest.mark.slow),
]
A2C_CASES = [
    ("vector", "discrete"),
    ("vector", "continuous"),
    ("vector", "multi_discrete"),
    ("vector", "dict"),
    pytest.param("image", "discrete", marks=pytest.mark.slow),
    pytest.param("image", "continuous", marks=pytest.mark.slow),
]


def _assert_solved(reward, action):
    if action == "continuous":
        assert reward.min().item() > -0.02, reward  # |a - target| < 0.14 in every env
    elif action == "dict":  # the pick right, the push within 0.14 of its target
        assert reward.min().item() > 0.98, reward
    else:  # every (dimension of every) action right
        assert reward.min().item() == 1.0, reward


@pytest.mark.parametrize(("observation", "action"), PPO_CASES)
def test_ppo_learns_a_contextual_bandit(observation, action):
    config = PPOConfig(learning_rate=3e-3, lr_schedule="constant", gamma=0.0)
    schedule = OnPolicySchedule(num_updates_per_train_iter=4, mini_batch_size=32)
    reward = _train_on_bandit(make_ppo, config, observation, action, 25, schedule)
    _assert_solved(reward, action)


@pytest.mark.parametrize(("observation", "action"), A2C_CASES)
def test_a2c_learns_a_contextual_bandit(observation, action):
    config = A2CConfig(learning_rate=3e-3, optimizer="adam", gamma=0.0, normalize_advantages=True)
    _assert_solved(_train_on_bandit(make_a2c, config, observation, action, iterations=80), action)


class _ScriptedKL(Algorithm):
    """Reports a scripted approximate KL per update and stops its passes as PPO does."""

    stop_epochs = ActorCriticAlgorithm.stop_epochs

    def __init__(self, kl_per_update, target_kl):
        super().__init__()
        self.kl = list(kl_per_update)
        self.target_kl = target_kl

    def optimizers(self):
        return {}

    def predict_step(self, time_step, state, agent_info=()):
        raise AssertionError("does not act")

    rollout_step = predict_step

    def preprocess_experience(self, experience):
        return {"x": torch.zeros(4)}  # two minibatches per pass

    def update(self, batch):
        kl = torch.tensor(self.kl.pop(0))
        return UpdateResult({"train/approx_kl": kl}, torch.tensor(False))


def test_target_kl_judges_each_pass_on_its_own():
    # Pass 1 has KL 0, pass 2 KL 0.03: over the target 0.02, though the running mean
    # over both passes (0.015) is not. The passes stop after pass 2.
    algorithm = _ScriptedKL([0.0, 0.0, 0.03, 0.03, 0.0, 0.0, 0.0, 0.0], target_kl=0.02)
    schedule = OnPolicySchedule(num_updates_per_train_iter=4, mini_batch_size=2)
    result = OnPolicyScheme(algorithm, _FixedSource(_fixed_experience()), schedule).train_iter()
    assert result.metrics["train/num_updates"] == 4
    assert result.metrics["train/approx_kl"] == pytest.approx(0.015)


@pytest.mark.parametrize("name", ["sac_pendulum", "td3_pendulum", "ddpg_pendulum", "dqn_cartpole"])
def test_the_other_algorithms_refuse_a_dict_action_and_name_ppo_and_a2c(name):
    config = load_config(name)
    spec = CompositeSpec({"pick": DiscreteTensorSpec((), nvec=2), "push": TensorSpec((1,))})
    with pytest.raises(UnsupportedSpaceError, match="PPO or A2C"):
        build_algorithm(config.algorithm, VECTOR, spec, config.network)


@pytest.mark.parametrize("share_encoder", [True, False])
def test_a_training_step_runs_a_shared_encoder_once(share_encoder):
    # On images the encoder (a CNN) is most of an update's cost: with share_encoder, a
    # training step encodes each observation once for the policy and the value alike.
    network = NetworkConfig(hidden_sizes=(8,), cnn="small", share_encoder=share_encoder)
    images = BoundedTensorSpec((2, 16, 16), torch.uint8, 0, 255)
    algorithm = make_ppo(PPOConfig(), images, TWO_ACTIONS, network)
    encoders = {algorithm.network.actor_encoder, algorithm.network.critic_encoder}
    calls = []
    for encoder in encoders:
        encoder.register_forward_hook(lambda module, args, output: calls.append(module))
    observation = torch.randint(0, 256, (5, 2, 16, 16), dtype=torch.uint8)
    inputs = {
        "observation": observation,
        "action": torch.tensor([0, 1, 1, 0, 1]),
        **{key: torch.zeros(5) for key in ("old_log_prob", "advantage", "return", "old_value")},
    }
    info = algorithm.train_step(inputs, ()).info
    assert sorted(map(id, calls)) == sorted(map(id, encoders))  # each encoder once
    with torch.no_grad():
        distribution = algorithm.network.distribution(observation)
        value = algorithm.network.value(observation)
    torch.testing.assert_close(info["log_prob"], distribution.log_prob(inputs["action"]))
    torch.testing.assert_close(info["value"], value)
