"""What a world model's latent knows: ridge-regression probes from latent features to signals.

Denoised MDP's claim, measured: the x latent (the policy's input) should recover the
controllable state (R² near 1) and not the distractors (R² near 0), while a Dreamer latent
holds both. `collect_latents` runs a trained policy and records the filtered latent and
the observation of every step; `ridge_r2` fits a probe on some episodes and scores it on
held-out ones.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        train_features, test_features: ``[N, F]`` and ``[M, F]``.
        train_targets, test_targets: ``[N, K]`` and ``[M, K]``.

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
