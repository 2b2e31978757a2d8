"""The off-policy training scheme: unroll into a replay buffer, train on minibatches of it.

``train_iter()`` (DESIGN §5) does one unroll of ``unroll_length`` steps (with uniform
random actions until ``initial_collect_steps`` env steps were taken), adds it raw to
the replay buffer, then trains:

- ``whole_replay_buffer_training``: ``num_updates_per_train_iter`` passes over the whole
  buffer (a window starting at every stored step: `whole_buffer_minibatches`), shuffled
  along the batch dim with time order kept, cut into ``(mini_batch_size,
  mini_batch_length)`` minibatches;
- otherwise: ``mini_batch_size * num_updates_per_train_iter`` windows of
  ``mini_batch_length`` steps are sampled, shuffled and cut into minibatches.

Each minibatch goes: data transformers -> ``preprocess_experience`` -> `Algorithm.update`
(``train_step`` -> ``calc_loss`` -> optimizer steps -> ``after_update``) -> priority update.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from cadence.algorithms.algorithm import Algorithm, AlgStep, UpdateResult
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.algorithms.scheme import IterationProgress, IterationResult, NoProgress, UpdateTotals
from cadence.data import distributed
from cadence.data.experience import Experience
from cadence.data.nest import Nest
from cadence.data.specs import Spec
from cadence.data.time_step import TimeStep
from cadence.replay.buffer import ReplayBuffer, ReplaySample
from cadence.replay.chunk_writer import ChunkWriter, auto_chunk_length
from cadence.replay.persistence import read_snapshot, write_snapshot
from cadence.replay.prioritized import PrioritizedSampler, linear_schedule
from cadence.replay.samplers import SampleIndices

Policy = Callable[[TimeStep, Nest, Nest], AlgStep]
SampleTransform = Callable[[ReplaySample], ReplaySample]


class PolicySource(Protocol):
    """Where experience comes from: `cadence.collect.Collector` with a policy override."""

    num_env_steps_per_unroll: int

    def unroll(
        self, policy: Policy | None = None
    ) -> tuple[Experience, dict[str, torch.Tensor]]: ...


def make_replay_buffer(
    config: OffPolicyConfig, num_envs: int, num_env_steps: int, device: Any = "cpu"
) -> ReplayBuffer:
    """The replay buffer ``config`` asks for; beta anneals to 1 over the ``num_env_steps`` budget."""
    sampler = None
    if config.prioritized_replay:
        beta = linear_schedule(config.priority_beta, 1.0, max(num_env_steps, 1))
        sampler = PrioritizedSampler(alpha=config.priority_alpha, beta=beta)
    return ReplayBuffer(num_envs, config.replay_buffer_length, sampler=sampler, device=device)


def check_first_window(
    config: OffPolicyConfig, steps_per_env: int, env_steps_per_unroll: int, num_envs: int
) -> None:
    """Refuses a config whose first training iteration could not sample one window.

    Training starts after the unroll that reaches ``initial_collect_steps`` (counted in
    simulator steps, ``env_steps_per_unroll`` per unroll); by then each env holds
    ``steps_per_env`` stored steps per unroll, which must add up to ``mini_batch_length``.

    Raises:
        ValueError: naming the keys to change, with the smallest value that works.
    """
    length = config.mini_batch_length
    if length > config.replay_buffer_length:
        raise ValueError(
            f"algorithm.off_policy.mini_batch_length={length} is longer than "
            f"replay_buffer_length={config.replay_buffer_length} (the steps kept per env): "
            f"raise replay_buffer_length or shorten the windows"
        )
    unrolls = max(1, -(-config.initial_collect_steps // env_steps_per_unroll))
    if unrolls * steps_per_env < length:
        needed = -(-length // steps_per_env) * env_steps_per_unroll
        raise ValueError(
            f"training would start with {unrolls * steps_per_env} steps per env in replay "
            f"(initial_collect_steps={config.initial_collect_steps} over {num_envs} envs, "
            f"{steps_per_env} stored steps each per unroll), fewer than one window of "
            f"mini_batch_length={length}: raise algorithm.off_policy.initial_collect_steps "
            f"to {needed} or more, or lower mini_batch_length"
        )


class RandomPolicy:
    """Uniform random actions, with the algorithm's own ``rollout_step`` run for its state and info.

    Running the real ``rollout_step`` keeps the stored ``info`` nest the same shape in the
    random and the learned phase (the replay storage fixes its layout on the first add).
    """

    def __init__(self, algorithm: Algorithm, action_spec: Spec):
        self.algorithm = algorithm
        self.action_spec = action_spec

    def __call__(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        step = self.algorithm.rollout_step(time_step, state, agent_info)
        batch_size = int(time_step.step_type.shape[0])
        action = self.action_spec.sample((batch_size,), device=time_step.step_type.device)
        return step._replace(output=action)


class OffPolicyScheme:
    """``train_iter()`` for off-policy algorithms (DQN, SAC, TD3, DDPG).

    Args:
        algorithm: the algorithm (its `update` takes what `preprocess_experience` makes of
            each minibatch, and may return new priorities).
        source: where unrolls come from.
        replay_buffer: holds the raw unrolls (see `make_replay_buffer`).
        config: the replay and minibatch knobs.
        action_spec: the env's action spec, for the initial random actions.
        transform: the data transformers applied to each sampled minibatch.
    """

    def __init__(
        self,
        algorithm: Algorithm,
        source: PolicySource,
        replay_buffer: ReplayBuffer,
        config: OffPolicyConfig,
        action_spec: Spec,
        transform: SampleTransform | None = None,
    ):
        self.algorithm = algorithm
        self.source = source
        self.replay_buffer = replay_buffer
        self.config = config
        self.transform = transform
        # A source acting with its own copy of the algorithm (a `Collector` on another
        # device than the learner's) runs that copy's rollout_step for state and info.
        self._random_policy = RandomPolicy(getattr(source, "acting", algorithm), action_spec)
        self._env_steps = 0
        self._writer: ChunkWriter | None = None
        self.progress: IterationProgress = NoProgress()

    def train_iter(self) -> IterationResult:
        """Returns the mean of every logged term and the completed-episode stats."""
        self.algorithm.eval()
        collecting = self._env_steps < self.config.initial_collect_steps
        # The group's steps (every rank unrolls alike): initial_collect_steps and the
        # priority schedule count them as one process of all the ranks' envs would.
        group_steps = self.source.num_env_steps_per_unroll * distributed.world_size()
        self.progress.collecting(group_steps, initial=collecting)
        experience, episodes = self.source.unroll(self._random_policy if collecting else None)
        self._env_steps += group_steps
        self.replay_buffer.add_experience(experience, self._stores_state())
        if isinstance(self.replay_buffer.sampler, PrioritizedSampler):
            # beta's schedule runs over the whole budget, initial collection included, so
            # that the last iteration trains with beta = 1.
            self.replay_buffer.sampler.advance(group_steps)
        totals = UpdateTotals(self.algorithm.skip_nonfinite_updates)
        if self._env_steps >= self.config.initial_collect_steps:
            self.algorithm.train()
            # Whole-buffer passes: as many minibatches as the buffer makes, not known ahead.
            config = self.config
            total = (
                None if config.whole_replay_buffer_training else config.num_updates_per_train_iter
            )
            self.progress.updating(0, total)
            for done, sample in enumerate(self._minibatches(), 1):
                totals.add(self._update(sample))
                self.progress.updating(done, total)
        return totals.result(episodes)

    def _stores_state(self) -> bool:
        """Whether the replay rows keep the recurrent state: the algorithm reads it back, or
        the buffer was restored from a run whose rows kept it (rows must keep one layout)."""
        storage = self.replay_buffer.storage
        kept = storage.initialized and "state" in storage.structure
        return self.algorithm.replays_state or kept

    def state_dict(self) -> dict[str, Any]:
        """The replay buffer (contents, counts, priorities) and the env-step count."""
        return {"replay_buffer": self.replay_buffer.state_dict(), "env_steps": self._env_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.replay_buffer.load_state_dict(state["replay_buffer"])
        self._env_steps = int(state["env_steps"])

    def persist(self, directory: Path) -> None:
        """Streams every completed chunk of the replay buffer to ``directory`` from now on
        (a background `ChunkWriter`), so that a checkpoint writes only what is new."""
        self.close()
        self._writer = ChunkWriter(directory, self.config.replay_chunk_length)
        self.replay_buffer.observer = self._writer

    def write_checkpoint(self, directory: Path) -> tuple[dict[str, Any], dict[str, str]]:
        """The replay buffer as chunk files and ``meta.pt`` in ``directory`` (chunks already
        streamed are hard-linked), and the env-step count for ``state.pt``."""
        directory.mkdir(parents=True, exist_ok=True)
        if self._writer is not None:
            files = self._writer.write_snapshot(self.replay_buffer, directory)
        else:
            chunk_length = self.config.replay_chunk_length or auto_chunk_length(
                self.replay_buffer.storage
            )
            files = write_snapshot(self.replay_buffer, directory, chunk_length)
        return {"env_steps": self._env_steps}, files

    def read_checkpoint(
        self, state: dict[str, Any], directory: Path, files: Mapping[str, str]
    ) -> None:
        """Restores the buffer from the checked chunk files (a checkpoint written before
        the buffer left ``state.pt`` holds it there, and is read from there)."""
        if "replay_buffer" in state:
            self.load_state_dict(state)
            return
        if self._writer is not None:
            self._writer.read_snapshot(self.replay_buffer, directory, files)
        else:
            read_snapshot(self.replay_buffer, directory, files)
        self._env_steps = int(state["env_steps"])

    def cut_episodes(self) -> None:
        """The episodes in progress end at each env's newest stored step (LAST, discount 1):
        the environments start new episodes, so no stored transition crosses the cut."""
        self.replay_buffer.end_episodes()

    def close(self) -> None:
        """Stops the chunk writer, if any, after it wrote what was queued."""
        if self._writer is not None:
            self._writer.close()
            self.replay_buffer.observer = None
            self._writer = None

    def _minibatches(self) -> Iterator[ReplaySample]:
        return replay_minibatches(self.replay_buffer, self.config, self._replay_fields())

    def _replay_fields(self) -> Sequence[str] | None:
        """The row keys to gather: the algorithm's ``replay_fields``, or all of them
        (None) when data transformers run first, since they may read any field."""
        return None if self.transform is not None else self.algorithm.replay_fields

    def _update(self, sample: ReplaySample) -> UpdateResult:
        if self.transform is not None:
            sample = self.transform(sample)
        result = self.algorithm.update(self.algorithm.preprocess_experience(sample))
        priorities = result.priorities
        if self.algorithm.skip_nonfinite_updates and bool(result.nonfinite):
            return result  # not applied: its priorities may be NaN too
        if priorities is not None and isinstance(self.replay_buffer.sampler, PrioritizedSampler):
            self.replay_buffer.update_priorities(
                sample.indices, priorities.detach().abs() + self.config.priority_epsilon
            )
        return result


def replay_minibatches(
    replay_buffer: ReplayBuffer, config: OffPolicyConfig, fields: Sequence[str] | None = None
) -> Iterator[ReplaySample]:
    """The ``(mini_batch_size, mini_batch_length)`` minibatches of one training iteration.

    ``whole_replay_buffer_training``: ``num_updates_per_train_iter`` shuffled passes over the
    buffer; otherwise ``mini_batch_size * num_updates_per_train_iter`` windows drawn at once
    (one sampler call), shuffled and cut into minibatches, each read only when it is reached:
    one copy of ``fields`` (all fields if None), not two of every field.
    """
    if config.whole_replay_buffer_training:
        for _ in range(config.num_updates_per_train_iter):
            yield from replay_buffer.iterate_minibatches(
                config.mini_batch_size, config.mini_batch_length, fields=fields
            )
        return
    total = config.mini_batch_size * config.num_updates_per_train_iter
    indices = replay_buffer.sample_indices(total, config.mini_batch_length)
    order = torch.randperm(total, device=indices.env_ids.device)
    shuffled = _map_indices(indices, lambda x: x.index_select(0, order))
    for start in range(0, total, config.mini_batch_size):
        rows = slice(start, start + config.mini_batch_size)
        yield replay_buffer.read(_map_indices(shuffled, lambda x, rows=rows: x[rows]), fields)


def _map_indices(
    indices: SampleIndices, fn: Callable[[torch.Tensor], torch.Tensor]
) -> SampleIndices:
    return SampleIndices(fn(indices.env_ids), fn(indices.positions), fn(indices.weights))
