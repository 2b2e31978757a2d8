"""Evaluation: the mean return of a policy's first episode in each environment."""

from __future__ import annotations

import torch

from cadence.algorithms.algorithm import Algorithm
from cadence.envs.environment import Environment


@torch.no_grad()
def evaluate_episodes(algorithm: Algorithm, env: Environment, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Runs ``predict_step`` until every environment of ``env`` ends its first episode.

    Counting only the first episode of each environment keeps the estimate
    unbiased (short episodes are not over-represented).

    Returns:
        ``{"return": [B], "length": [B]}`` plus ``"info/<key>": [B]`` with the
        value of each ``env_info`` key at the episode's LAST step.
    """
    was_training = algorithm.training
    algorithm.eval()
    time_step = env.reset().to(device)
    state = algorithm.initial_state(env.batch_size)
    done = torch.zeros(env.batch_size, dtype=torch.bool, device=device)
    returns = torch.zeros(env.batch_size, dtype=torch.float64, device=device)
    lengths = torch.zeros(env.batch_size, dtype=torch.int64, device=device)
    final_info = {k: torch.zeros(env.batch_size, device=device) for k in time_step.env_info}
    while not bool(done.all()):
        step = algorithm.predict_step(time_step, state)
        state = step.state
        time_step = env.step(step.output).to(device)
        active = ~done
        returns += torch.where(active, time_step.reward.double(), 0.0)
        lengths += active.long()
        ended = active & time_step.is_last()
        for key, value in time_step.env_info.items():
            final_info[key] = torch.where(ended, value.float(), final_info[key])
        done |= ended
    algorithm.train(was_training)
    return {"return": returns, "length": lengths, **{f"info/{k}": v for k, v in final_info.items()}}
