"""What a world model's latent knows: ridge-regression probes from latent features to signals.

Denoised MDP's claim, measured: the x latent (the policy's input) should recover the
controllable state (R² near 1) and not the distractors (R² near 0), while a Dreamer latent
holds both. `collect_latents` runs a trained policy and records the filtered latent and
the observation of every step; `ridge_r2` fits a probe on some episodes and scores it on
held-out ones; `probe_policy` does both for a policy in an env, and `noisy_pendulum_signals`
reads the result by the signals of ``cadence/NoisyPendulum-v0``. Probing a run directory's
checkpoint loads a policy through the trainer, one layer up: `cadence.latent_probe`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from cadence.envs.environment import Environment
from cadence.mbrl.algorithm import ModelBasedAlgorithm
from cadence.networks.rssm import RSSM


@torch.no_grad()
def collect_latents(
    algorithm: ModelBasedAlgorithm, env: Environment, groups: Sequence[str] = ("x",)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs the policy (deterministic, posterior means) for one episode in each env of
    ``env`` and returns per-step latent features of ``groups`` ``[E, T, F]`` and the raw
    observations ``[E, T, D]`` they were filtered from (E envs, T steps up to the first
    episode end of every env; steps after an env's episode ended repeat nothing: episodes
    of a fixed length, such as Pendulum's, are assumed)."""
    algorithm.eval()
    time_step = env.reset()
    state = algorithm.initial_state(env.batch_size)
    features, observations = [], []
    while True:
        step = algorithm.predict_step(time_step, state)
        state = step.state
        features.append(RSSM.features(state, groups))
        observations.append(time_step.observation.float())
        time_step = env.step(step.output)
        if bool(time_step.is_last().any()):
            break
    return torch.stack(features, 1), torch.stack(observations, 1)


def ridge_r2(
    train_features: torch.Tensor,
    train_targets: torch.Tensor,
    test_features: torch.Tensor,
    test_targets: torch.Tensor,
    alpha: float = 1.0,
) -> torch.Tensor:
    """R² on the test set of a ridge regression fit on the train set, per target column.

    Features are standardised with the train set's statistics and an intercept is fit
    (unpenalised); ``alpha`` is the L2 penalty on standardised features.

    Args:
        train_features: ``[N, F]``.
        train_targets: ``[N, K]``.
        test_features: ``[M, F]``.
        test_targets: ``[M, K]``.
        alpha: the L2 penalty.

    Returns:
        ``[K]``: ``1 - SSE / SST`` of each target on the test set (may be negative).
    """
    x, x_test = train_features.double(), test_features.double()
    y, y_test = train_targets.double(), test_targets.double()
    mean, std = x.mean(0), x.std(0).clamp(min=1e-8)
    x, x_test = (x - mean) / std, (x_test - mean) / std
    y_mean = y.mean(0)
    gram = x.T @ x + alpha * torch.eye(x.shape[1], dtype=x.dtype)
    weights = torch.linalg.solve(gram, x.T @ (y - y_mean))
    prediction = x_test @ weights + y_mean
    sse = (prediction - y_test).square().sum(0)
    sst = (y_test - y_test.mean(0)).square().sum(0).clamp(min=1e-12)
    return 1 - sse / sst


PROBE_EPISODES, PROBE_HELD_OUT = 12, 4
"""`probe_policy`'s defaults: episodes of evaluation, of which the last are held out."""


def probe_policy(
    algorithm: ModelBasedAlgorithm,
    env: Environment,
    held_out: int = PROBE_HELD_OUT,
    groups: Sequence[str] = ("x",),
) -> torch.Tensor:
    """R² of a ridge probe from ``algorithm``'s latent to each observed coordinate.

    Runs the deterministic policy for one episode in each env of ``env`` (torch's global
    generator seeded 0 inside, and restored after), fits `ridge_r2` from the features of
    ``groups`` (posterior belief and state) to the observation on the first
    ``env.batch_size - held_out`` episodes and scores it on the rest.

    Returns:
        ``[D]``: the held-out R² of every coordinate of the (flat) observation.
    """
    with torch.random.fork_rng():
        torch.manual_seed(0)
        features, observations = collect_latents(algorithm, env, groups)
    fit = env.batch_size - held_out
    return ridge_r2(
        features[:fit].flatten(0, 1),
        observations[:fit].flatten(0, 1).flatten(1),
        features[fit:].flatten(0, 1),
        observations[fit:].flatten(0, 1).flatten(1),
    )


def noisy_pendulum_signals(r2: torch.Tensor, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``r2`` (one R² per observed coordinate) read by NoisyPendulum's signals: ``cos``,
    ``sin`` and ``velocity`` (the pendulum's R²), and ``y_max`` / ``z_max``, the largest R²
    over the coordinates of the reward-relevant and of the other distractors (absent
    without them). On plain Pendulum only the first three.

    Args:
        r2: ``[D]``, from `probe_policy`.
        env_kwargs: the env's ``env_kwargs`` (its distractor counts).
    """
    from cadence.envs.suites.noisy_pendulum import NoisyPendulumEnv

    result: dict[str, Any] = {"cos": float(r2[0]), "sin": float(r2[1]), "velocity": float(r2[2])}
    if r2.shape[0] > 3:
        slices = NoisyPendulumEnv.signal_slices(
            env_kwargs.get("num_reward_distractors", 2), env_kwargs.get("num_noise_distractors", 4)
        )
        for name, key in (("y", "reward_distractors"), ("z", "noise_distractors")):
            part = r2[slices[key]]
            if part.numel():
                result[f"{name}_max"] = float(part.max())
    return result
