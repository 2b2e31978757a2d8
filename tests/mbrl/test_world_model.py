"""The grouped RSSM's conditioning table, its KL with free nats, and Dreamer's λ-returns."""

from __future__ import annotations

import math

import attrs
import pytest
import torch

from cadence.data.specs import BoundedTensorSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.mbrl.build import make_model_based
from cadence.mbrl.config import ActorCriticConfig, DenoisedMDPConfig, WorldModelConfig
from cadence.mbrl.world_model import kl_term
from cadence.networks.rssm import Gaussian, gaussian_kl

OBS, ACT = TensorSpec((5,)), BoundedTensorSpec((2,), minimum=-2.0, maximum=2.0)
SMALL = dict(hidden_size=16, mlp_hidden_size=16, embedding_size=8)
CADENCE_STRUCTURE = dict(z_inputs="cadence", z_prior_uses_y=False, layer_widths="hidden_size")
"""cadence's earlier RSSM structure, which most tests here check (the original's defaults:
tests/mbrl/test_paper_structure.py)."""


def _denoised(
    z: bool = True, joint_posterior: bool = False, structure: dict | None = None, **actor_critic
) -> torch.nn.Module:
    torch.manual_seed(0)
    sizes = dict(x_belief_size=6, x_state_size=3, y_belief_size=5, y_state_size=2)
    if z:
        sizes.update(z_belief_size=4, z_state_size=2)
    structure = CADENCE_STRUCTURE if structure is None else structure
    config = DenoisedMDPConfig(
        world_model=WorldModelConfig(
            **sizes, **SMALL, **structure, joint_posterior=joint_posterior
        ),
        actor_critic=ActorCriticConfig(hidden_size=16, num_layers=1, **actor_critic),
        eval_mode="mean",
    )
    return make_model_based(config, OBS, ACT)


def _random_latent(rssm, batch: int = 4) -> dict[str, torch.Tensor]:
    return {k: torch.randn_like(v) for k, v in rssm.initial_latent(batch).items()}


def test_the_action_moves_x_and_z_priors_but_never_y():
    rssm = _denoised().world_model.rssm
    latent = _random_latent(rssm)
    beliefs_1, priors_1 = rssm.transition(latent, torch.full((4, 2), -1.0))
    beliefs_2, priors_2 = rssm.transition(latent, torch.full((4, 2), 1.0))
    torch.testing.assert_close(beliefs_1["y"], beliefs_2["y"])
    torch.testing.assert_close(priors_1["y"].mean, priors_2["y"].mean)
    for group in ("x", "z"):
        assert not torch.allclose(priors_1[group].mean, priors_2[group].mean)


def test_y_prior_sees_only_previous_y_and_x_prior_never_sees_y_or_z():
    rssm = _denoised().world_model.rssm
    latent = _random_latent(rssm)
    action = torch.zeros(4, 2)
    other_x = {**latent, "x_state": torch.randn(4, 3), "x_belief": torch.randn(4, 6)}
    other_yz = {**latent, **{k: torch.randn_like(v) for k, v in latent.items() if k[0] in "yz"}}
    _, base = rssm.transition(latent, action)
    _, moved_x = rssm.transition(other_x, action)
    _, moved_yz = rssm.transition(other_yz, action)
    torch.testing.assert_close(base["y"].mean, moved_x["y"].mean)  # y ignores x
    torch.testing.assert_close(base["x"].mean, moved_yz["x"].mean)  # x ignores y and z
    assert not torch.allclose(base["z"].mean, moved_x["z"].mean)  # z sees x
    assert rssm.prior_inputs("x") == ("x_state", "action")
    assert rssm.prior_inputs("y") == ("y_state",)
    assert rssm.prior_inputs("z") == ("x_state", "z_state", "action")


def test_z_never_reaches_the_reward_but_every_group_reaches_the_decoder():
    model = _denoised().world_model
    latent = _random_latent(model.rssm)
    for group in ("x", "y", "z"):
        moved = {**latent, f"{group}_state": torch.randn_like(latent[f"{group}_state"])}
        reward_changed = not torch.allclose(model.reward(latent), model.reward(moved))
        assert reward_changed == (group != "z"), group
        assert not torch.allclose(model.decode(latent), model.decode(moved)), group
    # The reward is additive: f_x(x) + f_y(y).
    expected = model.reward(latent, ("x",)) + model.reward(latent, ("y",))
    torch.testing.assert_close(model.reward(latent), expected)


def test_the_policy_acts_from_x_alone():
    algorithm = _denoised()
    algorithm.eval()
    state = _random_latent(algorithm.world_model.rssm)
    time_step = TimeStep(
        step_type=torch.full((4,), int(StepType.MID)),
        reward=torch.zeros(4),
        discount=torch.ones(4),
        observation=torch.randn(4, 5),
        prev_action=torch.zeros(4, 2),
        env_id=torch.arange(4),
    )
    other = {**state, **{k: torch.randn_like(v) for k, v in state.items() if k[0] in "yz"}}
    step_1 = algorithm.predict_step(time_step, state)
    step_2 = algorithm.predict_step(time_step, other)
    torch.testing.assert_close(step_1.output, step_2.output)
    assert not torch.allclose(step_1.state["y_state"], step_2.state["y_state"])
    moved_x = {**state, "x_belief": torch.randn_like(state["x_belief"])}
    assert not torch.allclose(algorithm.predict_step(time_step, moved_x).output, step_1.output)


def test_observe_resets_the_latent_and_the_action_at_first_steps():
    model = _denoised().world_model
    torch.manual_seed(1)
    observation, action = torch.randn(2, 6, 5), torch.rand(2, 6, 2) * 4 - 2
    first = torch.zeros(2, 6, dtype=torch.bool)
    first[:, 0] = first[0, 3] = True
    torch.manual_seed(2)
    whole = model.observe(observation, action, first)
    torch.manual_seed(3)
    tail = model.observe(observation[:1, 3:], action[:1, 3:] * 0 + 7, first[:1, 3:])
    # From the FIRST step at t=3 on, sequence 0 depends on nothing before it nor on its
    # (ignored) previous action: the beliefs (deterministic given the states) agree.
    torch.testing.assert_close(whole.latent["x_belief"][:1, 3], tail.latent["x_belief"][:, 0])


@pytest.mark.parametrize("joint", [False, True])
def test_posteriors_see_their_own_belief_or_x_and_y_beliefs_when_joint(joint):
    rssm = _denoised(joint_posterior=joint).world_model.rssm
    beliefs = {g: torch.randn(4, rssm.sizes[g].belief) for g in ("x", "y", "z")}
    projected = rssm.project_embedding(torch.randn(4, 8))
    base = rssm.posterior(beliefs, projected)
    for moved_group in ("x", "y"):
        moved_beliefs = {**beliefs, moved_group: torch.randn_like(beliefs[moved_group])}
        moved = rssm.posterior(moved_beliefs, projected)
        affected = ("x", "y") if joint else (moved_group,)
        for g in ("x", "y", "z"):
            changed = not torch.allclose(base[g].mean, moved[g].mean)
            assert changed == (g in affected), (moved_group, g)
    assert sorted(rssm.posteriors) == (["xy", "z"] if joint else ["x", "y", "z"])


@pytest.mark.parametrize("structure", ["cadence", "original"])
@pytest.mark.parametrize("joint", [False, True])
def test_observe_filters_sequences_as_observe_step_does_one_step_at_a_time(
    joint, structure, monkeypatch
):
    if structure == "original":  # z reads the current x, y states: filter with zero noise
        original = dict(z_inputs="original", z_prior_uses_y=True, layer_widths="belief")
        rssm = _denoised(joint_posterior=joint, structure=original).world_model.rssm
        zeros = torch.zeros
        monkeypatch.setattr(torch, "randn", lambda *size, **kwargs: zeros(*size, **kwargs))
    else:
        rssm = _denoised(joint_posterior=joint).world_model.rssm
    torch.manual_seed(1)
    embedding, action = torch.rand(3, 5, 8) * 2 - 1, torch.rand(3, 5, 2) * 2 - 1
    first = torch.zeros(3, 5, dtype=torch.bool)
    first[:, 0] = first[1, 2] = True
    observed = rssm.observe(embedding, action, first)
    latent = rssm.initial_latent(3)
    for t in range(5):
        keep = (~first[:, t]).float().unsqueeze(-1)
        posterior_mean = rssm.observe_step(
            {k: v * keep for k, v in latent.items()}, action[:, t] * keep, embedding[:, t], False
        )
        for g in ("x", "y", "z"):
            torch.testing.assert_close(
                observed.posteriors[g].mean[:, t], posterior_mean[f"{g}_state"]
            )
            torch.testing.assert_close(
                observed.latent[f"{g}_belief"][:, t], posterior_mean[f"{g}_belief"]
            )
        # Continue from the sampled latent observe drew, so both see the same history.
        latent = {k: v[:, t] for k, v in observed.latent.items()}


def test_gaussian_kl_matches_the_closed_form():
    posterior = Gaussian(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]]))
    prior = Gaussian(torch.tensor([[0.0, 0.0]]), torch.tensor([[2.0, 1.0]]))
    # log(2/1) + (1 + 1) / (2 * 4) - 1/2 for the first dim, 0 for the second.
    torch.testing.assert_close(gaussian_kl(posterior, prior), torch.tensor([math.log(2) - 0.25]))


def test_free_nats_clamp_each_sample_not_the_mean():
    # Two samples with KLs 0.5 and 4 (1-d Gaussians with unit std: KL = mean^2 / 2).
    posterior = Gaussian(torch.tensor([[1.0], [math.sqrt(8.0)]]), torch.ones(2, 1))
    prior = Gaussian(torch.zeros(2, 1), torch.ones(2, 1))
    kl, loss = kl_term(posterior, prior, free_nats=3.0)
    torch.testing.assert_close(kl, torch.tensor(2.25))
    torch.testing.assert_close(loss, torch.tensor(3.5))  # (max(0.5, 3) + max(4, 3)) / 2
    posterior.mean.requires_grad_(True)
    kl_term(posterior, prior, free_nats=3.0)[1].backward()
    assert posterior.mean.grad[0].item() == 0.0  # under the free nats: no gradient
    assert posterior.mean.grad[1].item() == pytest.approx(math.sqrt(8.0) / 2)


def test_kl_balancing_splits_the_gradient_between_prior_and_posterior():
    posterior_mean, prior_mean = (
        torch.tensor([[2.0]], requires_grad=True),
        torch.tensor([[0.0]], requires_grad=True),
    )
    posterior = Gaussian(posterior_mean, torch.ones(1, 1))
    prior = Gaussian(prior_mean, torch.ones(1, 1))
    _, loss = kl_term(posterior, prior, free_nats=0.0, balance=0.8)
    torch.testing.assert_close(loss, torch.tensor(2.0))  # the value is the KL itself
    loss.backward()
    torch.testing.assert_close(posterior_mean.grad, torch.tensor([[0.2 * 2.0]]))
    torch.testing.assert_close(prior_mean.grad, torch.tensor([[-0.8 * 2.0]]))


def test_reward_weight_scales_the_reward_nll_in_the_loss_and_nothing_else():
    observation = torch.randn(2, 3, *OBS.shape)
    prev_action = torch.rand(2, 3, *ACT.shape) * 4 - 2
    reward = torch.randn(2, 3)
    first = torch.tensor([[True, False, False]] * 2)
    losses = {}
    for weight in (1.0, 10.0):
        model = _denoised().world_model
        model.config = WorldModelConfig(**{**attrs.asdict(model.config), "reward_weight": weight})
        torch.manual_seed(1)  # the same posterior noise in both
        losses[weight] = model.loss(observation, prev_action, reward, first)
    terms_1, terms_10 = losses[1.0].terms, losses[10.0].terms
    for name, value in terms_1.items():
        torch.testing.assert_close(terms_10[name], value)  # the terms are logged unweighted
    extra = 9.0 * terms_1["loss/reward_nll"]
    assert extra.item() > 0
    torch.testing.assert_close(losses[10.0].loss, losses[1.0].loss + extra)


def test_lambda_returns_by_hand():
    learner = _denoised().policy
    learner.config = ActorCriticConfig(gamma=0.5, lambda_=0.5)
    rewards = torch.tensor([[0.0], [1.0], [2.0]])  # index 0 unused
    values = torch.tensor([[0.0], [10.0], [20.0]])
    # R_1 = r_2 + gamma V_2 = 2 + 10 = 12
    # R_0 = r_1 + gamma ((1 - lambda) V_1 + lambda R_1) = 1 + 0.5 (5 + 6) = 6.5
    torch.testing.assert_close(
        learner.lambda_returns(rewards, values), torch.tensor([[6.5], [12.0]])
    )


@pytest.mark.parametrize(("paper_horizon", "steps"), [(False, 4), (True, 4)])
def test_imagination_uses_the_full_horizon_with_or_without_the_papers_returns(paper_horizon, steps):
    algorithm = _denoised(horizon=4, paper_horizon=paper_horizon)
    start = {k: v for k, v in _random_latent(algorithm.world_model.rssm).items() if k[0] == "x"}
    features, rewards, log_probs = algorithm.policy.imagine(algorithm.world_model, start)
    assert features.shape[0] == rewards.shape[0] == steps + 1
    assert log_probs.shape == (steps, 4)


def test_the_actor_sees_imagined_states_detached_as_in_the_reference():
    algorithm = _denoised(horizon=4)
    start = {k: v for k, v in _random_latent(algorithm.world_model.rssm).items() if k[0] == "x"}
    seen, forward = [], algorithm.policy.actor.forward

    def recording(features):
        seen.append(features.requires_grad)
        return forward(features)

    algorithm.policy.actor.forward = recording
    features, _, _ = algorithm.policy.imagine(algorithm.world_model, start)
    assert features.requires_grad  # the returns still reach the actions through the dynamics
    assert seen == [False] * 4


def _actor_losses_and_entropy(actor_entropy: float, updates: int) -> tuple[list[float], float]:
    # gamma 1: every imagined step weighs the same in the actor's loss
    algorithm = _denoised(
        horizon=3, gamma=1.0, actor_entropy=actor_entropy, actor_learning_rate=3e-2
    )
    policy, world_model = algorithm.policy, algorithm.world_model
    latent = {k: v[:, None] for k, v in _random_latent(world_model.rssm, batch=32).items()}

    def minimize(loss, optimizers):
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()

    losses, entropy = [], float("nan")
    for _ in range(updates):
        torch.manual_seed(len(losses))
        metrics, _ = policy.update(world_model, latent, {}, minimize)
        losses.append(float(metrics["loss/actor"]))
        entropy = float(metrics["train/policy_entropy"])
    return losses, entropy


def test_the_actor_entropy_regulariser_adds_the_log_densities_and_raises_entropy():
    plain, _ = _actor_losses_and_entropy(0.0, updates=1)
    regularised, entropy = _actor_losses_and_entropy(0.5, updates=1)
    # the same imagination (same seed, same initial weights), plus 0.5 x the mean log-density
    assert regularised[0] - plain[0] == pytest.approx(0.5 * -entropy, rel=1e-4)
    _, raised = _actor_losses_and_entropy(100.0, updates=20)
    _, unraised = _actor_losses_and_entropy(0.0, updates=20)
    assert raised > unraised + 1.0


def test_ridge_probe_recovers_a_linear_signal_and_not_an_independent_one():
    from cadence.mbrl.probe import ridge_r2

    torch.manual_seed(0)
    features = torch.randn(400, 6)
    signal = features @ torch.tensor([1.0, -2.0, 0.0, 0.5, 0.0, 0.0])
    noise = torch.randn(400)  # independent of the features
    targets = torch.stack([signal, noise], 1)
    r2 = ridge_r2(features[:300], targets[:300], features[300:], targets[300:], alpha=1e-3)
    assert r2[0] > 0.99
    assert r2[1] < 0.05


def test_a_checkpoint_with_the_posteriors_inside_the_groups_still_loads():
    rssm = _denoised().world_model.rssm
    old_names = {
        "beliefs.{g}.weight": "posterior_belief.weight",
        "embedding.weight": "posterior_embedding.weight",
        "embedding.bias": "posterior_embedding.bias",
        "head.1.weight": "posterior.1.weight",
        "head.1.bias": "posterior.1.bias",
    }
    old = {}
    for key, value in rssm.state_dict().items():
        if key.startswith("posteriors."):
            g, rest = key.removeprefix("posteriors.").split(".", 1)
            rest = "beliefs.{g}.weight" if rest.startswith("beliefs.") else rest
            key = f"groups.{g}.{old_names[rest]}"
        old[key] = value.clone() + 1.0
    other = _denoised().world_model.rssm
    other.load_state_dict(old)
    for key, value in other.state_dict().items():
        torch.testing.assert_close(value, rssm.state_dict()[key] + 1.0)


def test_the_conv_stacks_compute_in_channels_last_what_the_default_layout_computes():
    from cadence.mbrl.world_model import ConvDecoder, ConvEncoder

    torch.manual_seed(0)
    encoder, decoder = ConvEncoder(3, torch.nn.ELU), ConvDecoder(20, 3, torch.nn.ELU)
    assert encoder.net[0].weight.is_contiguous(memory_format=torch.channels_last)
    image, features = torch.randn(2, 3, 3, 64, 64), torch.randn(2, 3, 20)
    embedding, decoded = encoder(image), decoder(features)
    encoder.to(memory_format=torch.contiguous_format)
    decoder.to(memory_format=torch.contiguous_format)
    plain_encoder = encoder.net(image.flatten(0, 1)).reshape(2, 3, -1)
    hidden = decoder.project(features).reshape(-1, 1024, 1, 1)
    plain_decoder = decoder.net(hidden).reshape(2, 3, 3, 64, 64)
    assert embedding.shape == (2, 3, 1024) and decoded.shape == (2, 3, 3, 64, 64)
    torch.testing.assert_close(embedding, plain_encoder, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(decoded, plain_decoder, rtol=1e-4, atol=1e-5)
