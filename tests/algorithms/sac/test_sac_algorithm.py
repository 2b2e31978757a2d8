"""SAC by hand: critic targets at terminations and truncations, masking, temperature
tuning direction, no gradient between actor and critic, Polyak targets, discrete SAC."""

from __future__ import annotations

import math

import pytest
import torch

from cadence.algorithms.sac import SACConfig, default_target_entropy, make_sac
from cadence.algorithms.sac.loss import alpha_loss, critic_loss, soft_td_target
from cadence.config import load_config
from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec, TensorSpec
from cadence.data.time_step import StepType
from cadence.networks import NetworkConfig
from cadence.replay.buffer import ReplaySample
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

F, M, L = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
OBS = TensorSpec((3,))
BOX = BoundedTensorSpec((2,), minimum=-2.0, maximum=2.0)
DISCRETE = DiscreteTensorSpec((), nvec=3)
NETWORK = NetworkConfig(hidden_sizes=(16, 16), activation="relu", orthogonal_init=False)

# (step types, discounts, reward of step 1, weight, target with next soft value 3, gamma 0.5)
WINDOWS = [
    ([M, M], [1, 1], 1.0, 1.0, 1 + 0.5 * 3),  # an ordinary transition
    ([F, M], [1, 1], 2.0, 1.0, 2 + 0.5 * 3),  # the first of an episode: the same
    ([M, L], [1, 0], 4.0, 1.0, 4.0),  # terminated: the reward alone
    ([M, L], [1, 1], 4.0, 1.0, 4 + 0.5 * 3),  # truncated by a time limit: bootstrap
    ([L, F], [0, 1], 8.0, 0.0, 8 + 0.5 * 3),  # crosses an episode boundary: masked out
]


def _sample(action_spec, weights=None) -> ReplaySample:
    n = len(WINDOWS)
    reward = torch.tensor([[999.0, w[2]] for w in WINDOWS])
    steps = {
        "time_step": {
            "step_type": torch.tensor([w[0] for w in WINDOWS]),
            "reward": reward,
            "discount": torch.tensor([w[1] for w in WINDOWS], dtype=torch.float32),
            "observation": torch.randn(n, 2, 3),
            "prev_action": action_spec.zeros((n, 2)),
            "env_id": torch.zeros(n, 2, dtype=torch.int64),
            "env_info": {},
        },
        "action": action_spec.sample((n, 2)),
        "info": {},
    }
    weights = torch.ones(n) if weights is None else weights
    return ReplaySample(
        steps, torch.zeros(n, dtype=torch.int64), torch.zeros(n, 2), torch.arange(n), weights
    )


def _sac(action_spec=BOX, **overrides):
    torch.manual_seed(0)
    config = SACConfig(gamma=0.5, **overrides)
    return make_sac(config, OBS, action_spec, NETWORK)


def _constant_target_critic(sac, values=(3.0, 5.0)):
    """Target critics that answer ``values[e]`` everywhere: min over the ensemble is 3."""
    last = sac.target_critic.mlp[-1]
    with torch.no_grad():
        last.weight.zero_()
        for member, value in enumerate(values):
            last.bias[member].fill_(value)


def test_soft_td_target_bootstraps_on_truncation_not_on_termination():
    reward, next_value = torch.tensor([1.0, 1.0]), torch.tensor([10.0, 10.0])
    target = soft_td_target(reward, torch.tensor([0.0, 1.0]), next_value, gamma=0.9)
    assert target.tolist() == [1.0, 10.0]


@pytest.mark.parametrize("action_spec", [BOX, DISCRETE], ids=["continuous", "discrete"])
def test_critic_targets_by_hand_with_terminal_truncated_and_masked_windows(action_spec):
    # alpha ~ 0 removes the entropy bonus, so the next soft value is min(3, 5) = 3.
    sac = _sac(action_spec, initial_alpha=1e-12)
    _constant_target_critic(sac)
    batch = sac.preprocess_experience(_sample(action_spec))
    info = sac.train_step(batch).info
    expected = torch.tensor([w[4] for w in WINDOWS])
    assert torch.allclose(info["target"], expected), info["target"]
    assert batch["weight"].tolist() == [w[3] for w in WINDOWS]
    assert float(info["count"]) == 4


def test_the_entropy_bonus_enters_the_target_with_alpha():
    sac = _sac(initial_alpha=0.5)
    _constant_target_critic(sac)
    batch = sac.preprocess_experience(_sample(BOX))
    with torch.random.fork_rng():
        info = sac.train_step(batch).info
    with torch.random.fork_rng():
        _, next_log_prob = sac.actor(batch["next_observation"]).rsample_with_log_prob()
    discount = torch.tensor([w[1][1] for w in WINDOWS], dtype=torch.float32)
    expected = batch["reward"] + 0.5 * discount * (3.0 - 0.5 * next_log_prob)
    assert torch.allclose(info["target"], expected)


def test_masked_and_weighted_samples_in_the_critic_loss():
    q = torch.tensor([[1.0, 2.0, 3.0], [1.0, 4.0, 3.0]])
    target = torch.tensor([0.0, 0.0, 100.0])
    weight = torch.tensor([1.0, 0.5, 0.0])  # the last sample is masked
    loss, priorities = critic_loss(q, target, weight, count=torch.tensor(2.0))
    # critic 0: (0.5 * 1 * 1 + 0.5 * 4 * 0.5) / 2 = 0.75; critic 1: (0.5 + 0.5 * 16 * 0.5) / 2 = 2.25
    # (the raw |TD| of the masked sample comes back too: SACAlgorithm zeroes its priority)
    assert math.isclose(float(loss), 3.0)
    assert priorities.tolist() == [1.0, 3.0, 97.0]


def test_alpha_loss_gradient_raises_alpha_when_entropy_is_below_target():
    log_alpha = torch.zeros((), requires_grad=True)
    log_prob = torch.tensor([1.0, 1.0])  # entropy about -1, below the target of 0
    alpha_loss(log_alpha, log_prob, 0.0, torch.ones(2), torch.tensor(2.0)).backward()
    assert float(log_alpha.grad) < 0  # gradient descent increases log alpha


@pytest.mark.parametrize("action_spec", [BOX, DISCRETE], ids=["continuous", "discrete"])
@pytest.mark.parametrize("target_entropy, grows", [(50.0, True), (-50.0, False)])
def test_alpha_moves_towards_the_target_entropy(action_spec, target_entropy, grows):
    sac = _sac(action_spec, target_entropy=target_entropy, alpha_learning_rate=0.1)
    batch = sac.preprocess_experience(_sample(action_spec))
    before = float(sac.log_alpha.detach())
    extra, _, _ = sac.update(batch)
    assert (float(sac.log_alpha.detach()) > before) == grows
    assert float(extra["train/alpha"]) == pytest.approx(math.exp(before))


def test_fixed_alpha_is_not_trained():
    sac = _sac(autotune_alpha=False, initial_alpha=0.2)
    sac.update(sac.preprocess_experience(_sample(BOX)))
    assert "alpha" not in sac.optimizers()
    assert float(sac.log_alpha.exp()) == pytest.approx(0.2)


@pytest.mark.parametrize("action_spec", [BOX, DISCRETE], ids=["continuous", "discrete"])
def test_no_gradient_leaks_between_actor_critic_and_alpha(action_spec):
    sac = _sac(action_spec)
    batch = sac.preprocess_experience(_sample(action_spec))
    extra = sac.calc_loss(sac.train_step(batch).info).extra
    groups = {
        "actor": list(sac.actor.parameters()),
        "critic": list(sac.critic.parameters()),
        "alpha": [sac.log_alpha],
    }
    for loss_name, owner in [
        ("loss/actor", "actor"),
        ("loss/critic", "critic"),
        ("loss/alpha", "alpha"),
    ]:
        for group, params in groups.items():
            grads = torch.autograd.grad(
                extra[loss_name], params, retain_graph=True, allow_unused=True
            )
            reached = any(g is not None and bool(g.abs().sum() > 0) for g in grads)
            assert reached == (group == owner), f"{loss_name} -> {group}: {reached}"


def test_update_moves_targets_by_tau_and_changes_every_network():
    sac = _sac(tau=0.25)
    online_before = [p.detach().clone() for p in sac.critic.parameters()]
    target_before = [p.detach().clone() for p in sac.target_critic.parameters()]
    actor_before = [p.detach().clone() for p in sac.actor.parameters()]
    sac.update(sac.preprocess_experience(_sample(BOX)))
    for target, old_target, online in zip(
        sac.target_critic.parameters(), target_before, sac.critic.parameters(), strict=True
    ):
        assert torch.allclose(target, old_target + 0.25 * (online.detach() - old_target), atol=1e-6)
    assert any(
        not torch.equal(a, b) for a, b in zip(sac.critic.parameters(), online_before, strict=True)
    )
    assert any(
        not torch.equal(a, b) for a, b in zip(sac.actor.parameters(), actor_before, strict=True)
    )


def test_actions_stay_within_the_bounds_and_discrete_actions_are_integers():
    from cadence.data.time_step import TimeStep

    observation = torch.randn(64, 3) * 10
    time_step = TimeStep(
        step_type=torch.ones(64, dtype=torch.int64),
        reward=torch.zeros(64),
        discount=torch.ones(64),
        observation=observation,
        prev_action=torch.zeros(64, 2),
        env_id=torch.arange(64),
    )
    action = _sac().rollout_step(time_step, ()).output
    assert action.shape == (64, 2) and float(action.abs().max()) <= 2.0
    discrete = _sac(DISCRETE).predict_step(time_step, ()).output
    assert discrete.dtype == torch.int64 and set(discrete.tolist()) <= {0, 1, 2}


def test_default_target_entropy():
    assert default_target_entropy(SACConfig(), BOX) == -2.0
    assert default_target_entropy(SACConfig(), DISCRETE) == pytest.approx(0.98 * math.log(3))
    assert default_target_entropy(SACConfig(target_entropy=-0.5), BOX) == -0.5


def test_windows_longer_than_one_step_are_refused():
    from cadence.algorithms.off_policy_config import OffPolicyConfig

    config = SACConfig(off_policy=OffPolicyConfig(mini_batch_length=3))
    with pytest.raises(ValueError, match="mini_batch_length=2"):
        make_sac(config, OBS, BOX, NETWORK)


def test_discrete_sac_trains_on_cartpole_for_a_few_iterations(tmp_path):
    overrides = [
        f"root_dir={tmp_path / 'run'}",
        "trainer.progress_bar=off",
        "env.name=CartPole-v1",
        "trainer.num_env_steps=400",
        "trainer.unroll_length=50",
        "trainer.eval_interval=4",
        "trainer.num_eval_episodes=2",
        "trainer.summary_interval=1",
        "algorithm.off_policy.initial_collect_steps=100",
        "algorithm.off_policy.mini_batch_size=32",
        "algorithm.off_policy.num_updates_per_train_iter=5",
        "network.hidden_sizes=[32,32]",
    ]
    train(load_config("sac_pendulum", overrides))
    records = read_metrics(tmp_path / "run")
    trained = [r for r in records if r.get("train/num_updates", 0) > 0]
    assert trained and all(math.isfinite(r["loss/critic"]) for r in trained)
    assert trained[-1]["train/entropy"] <= math.log(2) + 1e-5
    assert any(r.get("eval/episode_return") is not None for r in records)


def test_a_masked_window_gets_priority_zero_and_weights_do_not_change_the_normaliser():
    # DQN and TD3 give a window whose first step is LAST priority 0 and average over the
    # valid windows; SAC does the same (it gave such windows their raw |TD| as priority,
    # and divided by the sum of importance weights instead of the valid count).
    sac = _sac()
    weights = torch.tensor([0.5, 0.25, 1.0, 0.5, 0.75])
    batch = sac.preprocess_experience(_sample(BOX, weights))
    info = sac.train_step(batch).info
    assert float(info["count"]) == 4  # four valid windows, whatever their weights
    _, _, priorities = sac.update(batch)
    masked = [i for i, w in enumerate(WINDOWS) if w[3] == 0.0]
    assert masked and all(float(priorities[i]) == 0.0 for i in masked)
    assert all(float(priorities[i]) > 0.0 for i in range(len(WINDOWS)) if i not in masked)
