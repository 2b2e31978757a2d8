"""``paper_horizon`` computes the Denoised MDP original's λ-returns, and ``eval_mode``
"original" acts as the original's evaluation does.

The original's code (facebookresearch/denoised_mdp, paths relative to its ``denoised_mdp``
package) is transcribed here where a test compares against it.
"""

from __future__ import annotations

import pytest
import torch

from cadence.data.specs import BoundedTensorSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.mbrl.build import make_model_based
from cadence.mbrl.config import ActorCriticConfig, DenoisedMDPConfig, WorldModelConfig
from cadence.mbrl.policies import MODE_SAMPLES
from cadence.networks.rssm import RSSM

OBS, ACT = TensorSpec((5,)), BoundedTensorSpec((2,), minimum=-2.0, maximum=2.0)
HORIZON = 15


def _algorithm(eval_mode: str = "original", **actor_critic):
    torch.manual_seed(0)
    world_model = WorldModelConfig(
        x_belief_size=6, x_state_size=3, y_belief_size=5, y_state_size=2, embedding_size=8,
        mlp_hidden_size=16,
    )  # fmt: skip
    actor_critic = ActorCriticConfig(hidden_size=16, **actor_critic)
    config = DenoisedMDPConfig(
        world_model=world_model, actor_critic=actor_critic, eval_mode=eval_mode
    )
    return make_model_based(config, OBS, ACT)


def original_lambda_return(imged_reward, value_pred, bootstrap, discount, lambda_):
    """agents/utils.py, lambda_return (lines 20-33), transcribed."""
    next_values = torch.cat([value_pred[1:], bootstrap[None]], dim=0)
    inputs = imged_reward + (discount * (1 - lambda_)) * next_values
    last = bootstrap
    outputs = []
    for index in range(inputs.shape[0] - 1, -1, -1):
        last = inputs[index] + discount * lambda_ * last
        outputs.insert(0, last)
    return torch.stack(outputs, 0)


def original_returns(rewards, values, discount, lambda_):
    """agents/learning/policy.py, DynamicsBackpropagateActorCritic.train_step (lines
    151-160): the imagined latent states are the ``planning_horizon`` states after the start
    (agents/denoised_mdp.py, imagine_ahead_noiseless, line 274 on: the start is not among
    them), ``reward_mean`` and ``value_prediction`` are of those states, and

        lambda_return(reward_mean[:-1], value_prediction[:-1], bootstrap=value_prediction[-1])

    ``rewards``, ``values``: ``[H + 1, N]`` of cadence's imagined states 0 (the start) .. H."""
    reward_mean, value_prediction = rewards[1:], values[1:]
    return original_lambda_return(
        reward_mean[:-1], value_prediction[:-1], value_prediction[-1], discount, lambda_
    )


@pytest.mark.parametrize(("gamma", "lambda_"), [(1.0, 1.0), (0.9, 0.8)])
def test_paper_horizon_returns_are_the_originals_on_a_15_step_trajectory(gamma, lambda_):
    learner = _algorithm(horizon=HORIZON, paper_horizon=True, gamma=gamma, lambda_=lambda_).policy
    torch.manual_seed(1)
    rewards = torch.randn(HORIZON + 1, 3)  # states 0 .. 15; cadence never reads rewards[0]
    rewards[0] = 0.0
    values = torch.randn(HORIZON + 1, 3)
    returns = learner.paper_lambda_returns(rewards, values)
    assert returns.shape == (HORIZON - 1, 3)  # 14 returns
    torch.testing.assert_close(returns, original_returns(rewards, values, gamma, lambda_))
    if gamma == lambda_ == 1:  # the return at the start: r1 .. r14 + V(s15)
        torch.testing.assert_close(returns[0], rewards[1:HORIZON].sum(0) + values[HORIZON])


@pytest.mark.parametrize("paper_horizon", [False, True])
def test_both_horizons_imagine_every_step(paper_horizon):
    algorithm = _algorithm(horizon=HORIZON, paper_horizon=paper_horizon)
    start = {k: v for k, v in algorithm.world_model.rssm.initial_latent(4).items() if k[0] == "x"}
    features, rewards, log_probs = algorithm.policy.imagine(algorithm.world_model, start)
    assert features.shape[0] == rewards.shape[0] == HORIZON + 1
    assert log_probs.shape == (HORIZON, 4)


def test_paper_horizon_update_learns_from_14_returns():
    algorithm = _algorithm(horizon=HORIZON, paper_horizon=True)
    latent = {k: v[:, None].expand(-1, 2, -1) for k, v in _random_latent(algorithm).items()}
    seen = []
    original = algorithm.policy.paper_lambda_returns

    def recording(rewards, values):
        seen.append((rewards.shape[0], values.shape[0]))
        return original(rewards, values)

    algorithm.policy.paper_lambda_returns = recording
    metrics, nonfinite = algorithm.policy.update(
        algorithm.world_model, latent, {}, algorithm.minimize
    )
    assert seen == [(HORIZON + 1, HORIZON + 1)]
    assert not nonfinite and torch.isfinite(metrics["loss/value"])


def _random_latent(algorithm, batch: int = 4) -> dict[str, torch.Tensor]:
    return {k: torch.randn_like(v) for k, v in algorithm.initial_state(batch).items()}


def _time_step(batch: int = 4) -> TimeStep:
    torch.manual_seed(3)
    return TimeStep(
        step_type=torch.full((batch,), int(StepType.MID)),
        reward=torch.zeros(batch),
        discount=torch.ones(batch),
        observation=torch.randn(batch, 5),
        prev_action=torch.zeros(batch, 2),
        env_id=torch.arange(batch),
    )


def test_original_evaluation_feeds_back_a_posterior_sample_and_the_most_likely_action():
    """envs/interaction.py, ModelActorInteractor.act_and_update_state: the latent is
    posterior_rsample_one_step's (a sample) and the action world_model.act(explore=False),
    agents/base.py: actor_model.get_action(det=True), networks/actor.py: SampleDist.mode,
    the most likely of 100 samples."""
    algorithm = _algorithm("original")
    algorithm.eval()
    state, time_step = _random_latent(algorithm), _time_step()
    torch.manual_seed(5)
    step = algorithm.predict_step(time_step, state)
    # The same draws by hand: the posterior sample, then 100 policy samples.
    torch.manual_seed(5)
    latent = algorithm.filter(time_step, state, sample=True)
    policy = algorithm.policy.actor(RSSM.features(latent))
    samples, log_probs = policy.rsample_with_log_prob((MODE_SAMPLES,))
    best = samples[log_probs.argmax(0), torch.arange(4)]
    torch.testing.assert_close(step.state["x_state"], latent["x_state"])
    torch.testing.assert_close(step.output, algorithm.world_model.env_action(best))
    mean = algorithm.filter(time_step, state, sample=False)
    assert not torch.allclose(step.state["x_state"], mean["x_state"])  # a sample, not the mean
    torch.manual_seed(6)
    assert not torch.allclose(algorithm.predict_step(time_step, state).output, step.output)


def test_mean_evaluation_is_deterministic_from_the_posterior_mean():
    algorithm = _algorithm("mean")
    algorithm.eval()
    state, time_step = _random_latent(algorithm), _time_step()
    torch.manual_seed(5)
    step = algorithm.predict_step(time_step, state)
    torch.manual_seed(6)
    again = algorithm.predict_step(time_step, state)
    torch.testing.assert_close(step.output, again.output)
    mean = algorithm.filter(time_step, state, sample=False)
    torch.testing.assert_close(step.state["x_state"], mean["x_state"])
    mode = algorithm.policy.actor(RSSM.features(mean)).mode
    torch.testing.assert_close(step.output, algorithm.world_model.env_action(mode))
