"""Evaluation: the mean return of a policy's first episode in each environment."""

from __future__ import annotations

import logging

import torch

from cadence.algorithms.algorithm import Algorithm, AlgStep, reset_state
from cadence.data.nest import Nest, flatten
from cadence.data.time_step import TimeStep
from cadence.envs.environment import Environment
from cadence.trainer.config import DEFAULT_EVAL_MAX_EPISODE_STEPS
from cadence.transforms.transformer import DataTransformer

logger = logging.getLogger(__name__)

ENV_STEPS = "env steps"
"""The unit of episode lengths, as of budgets (``trainer.num_env_steps``): simulator steps,
an env's steps times ``env.action_repeat`` (an episode that ends inside a repeated action
counts the whole repeat, as the budget does)."""


@torch.no_grad()
def evaluate_episodes(
    algorithm: Algorithm,
    env: Environment,
    device: torch.device | str = "cpu",
    transformer: DataTransformer | None = None,
    max_steps: int = DEFAULT_EVAL_MAX_EPISODE_STEPS,
    action_repeat: int = 1,
) -> dict[str, torch.Tensor]:
    """Runs ``predict_step`` until every environment of ``env`` ends its first episode, or
    ``max_steps`` steps have run.

    Counting only the first episode of each environment keeps the estimate
    unbiased (short episodes are not over-represented). An episode still running after
    ``max_steps`` steps is cut there (its return is that of its steps so far), with a
    warning that says how to bound the env's episodes.

    Args:
        algorithm: the policy.
        env: the evaluation environments.
        device: where the algorithm runs.
        transformer: the training's data transformers, applied in eval mode (their
            statistics frozen); returns are those of the raw rewards.
        max_steps: the steps (of ``env``) an episode may run before it is cut.
        action_repeat: simulator steps per step of ``env`` (``env.action_repeat``).

    Returns:
        ``{"return": [B], "length": [B], "cut": [B]}`` (``length`` in env steps as budgets
        count them, `ENV_STEPS`; ``cut``: 1.0 where the episode was cut at ``max_steps``,
        else 0.0) plus ``"info/<key>": [B]`` with the value of each ``env_info`` key at
        the episode's LAST step.
    """
    was_training = algorithm.training
    algorithm.eval()
    policy = TransformedPolicy(algorithm, transformer, env.batch_size)
    time_step = env.reset().to(device)
    state = algorithm.initial_state(env.batch_size)
    done = torch.zeros(env.batch_size, dtype=torch.bool, device=device)
    returns = torch.zeros(env.batch_size, dtype=torch.float64, device=device)
    lengths = torch.zeros(env.batch_size, dtype=torch.int64, device=device)
    final_info = {k: torch.zeros(env.batch_size, device=device) for k in time_step.env_info}
    for _ in range(max_steps):
        if bool(done.all()):
            break
        step = policy.predict_step(time_step, state)
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
    policy.restore_mode()
    cut = ~done
    if bool(cut.any()):
        warn_cut_episodes(int(cut.sum()), env.batch_size, max_steps)
    return {
        "return": returns,
        "length": lengths * action_repeat,
        "cut": cut.float(),
        **{f"info/{k}": v for k, v in final_info.items()},
    }


def warn_cut_episodes(cut: int, episodes: int, max_steps: int) -> None:
    """Warns that ``cut`` of ``episodes`` evaluated episodes ran ``max_steps`` steps without
    ending."""
    logger.warning(
        "%d of %d evaluation episodes did not end within %d steps and were cut there (their "
        "returns are partial): the env may have no time limit. Set env.max_episode_steps to "
        "end its episodes, or raise trainer.eval_max_episode_steps",
        cut, episodes, max_steps,
    )  # fmt: skip


class TransformedPolicy:
    """``predict_step`` on transformed time steps, the transformer in eval mode until restored.

    As the collector does, it resets the recurrent state to the initial state where a
    time step is FIRST, so that each episode starts afresh.
    """

    def __init__(self, algorithm: Algorithm, transformer: DataTransformer | None, batch_size: int):
        self.algorithm = algorithm
        self.transformer = transformer
        self._initial_state = algorithm.initial_state(batch_size)
        self._stateful = bool(flatten(self._initial_state))
        self._was_training = transformer is not None and transformer.training
        self._state = None if transformer is None else transformer.initial_state(batch_size)
        if transformer is not None:
            transformer.eval()

    def predict_step(self, time_step: TimeStep, state: Nest) -> AlgStep:
        if self.transformer is not None:
            time_step, self._state = self.transformer.transform_time_step(time_step, self._state)
        if self._stateful:
            state = reset_state(time_step.step_type, state, self._initial_state)
        return self.algorithm.predict_step(time_step, state)

    def restore_mode(self) -> None:
        if self.transformer is not None:
            self.transformer.train(self._was_training)
