"""The `Algorithm` contract (DESIGN §5): the one interface the collector and the trainer call.

An algorithm is an ``nn.Module`` with

- three step functions, each ``(inputs, state) -> AlgStep(output, state, info)``:
  `predict_step` (evaluation and play), `rollout_step` (an unroll: exploration, and
  ``info`` is stored with the experience) and `train_step` (recomputing on experience).
  Recurrent state is always explicit: `initial_state` gives that of new episodes, the
  collector passes each step's ``state`` to the next and resets it to the initial state
  where a step is FIRST, and ``agent_info`` (per-slot parameters such as a per-env
  epsilon) reaches the acting steps as a nest of ``[B, ...]`` tensors;
- ``calc_loss(info) -> LossInfo(loss, extra)`` with named terms;
- an update it owns: `preprocess_experience` turns an unroll (on-policy) or replayed
  windows (off-policy) into a batch, the scheme cuts it into minibatches, and `update`
  does one minibatch: losses, backward, the gradient-sync hook, clipping, optimizer
  steps, target updates. It returns an `UpdateResult` whose metrics stay tensors and
  whose ``nonfinite`` flag the trainer reads once per iteration (no host sync per update),
  so one update has the shape of one compiled graph;
- `optimizers`, checkpointed with the parameters.

The seam to the optional fast path: an algorithm's `update` passes the pure part of its
work (everything but Python bookkeeping such as counters) through `in_graph`, and steps
several optimizers through `optimizer_steps`. Eager, both simply run. An accelerator
(`UpdateAccelerator`, installed with `set_accelerator`: `cadence.accel` when a run
compiles) may run `in_graph`'s function as one compiled graph per minibatch shape, where
`minimize`, written once, takes the gradients and steps the optimizers through the
accelerator (`UpdateAccelerator.minimize`), and may step the optimizers together. The core
never imports the accelerator; the trainer installs it.

The default `update` is the minibatch pipeline ``train_step -> calc_loss -> minimize ->
after_update``; an algorithm with several losses or optimizers writes its own from the
same parts (`minimize`, `update_result`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import torch
from torch import nn

from cadence.algorithms.accelerator import (
    ACCELERATOR_STATE_KEY,
    OptimizerSteps,
    UpdateAccelerator,
)
from cadence.data.nest import Nest, map_structure
from cadence.data.time_step import StepType, TimeStep

if TYPE_CHECKING:
    from cadence.algorithms.agent_view import AlgorithmAgent

_OWN_UPDATE_METHODS = frozenset({"update", "update_step", "minimize", "priorities"})
"""The methods whose writing declares `Algorithm.own_update`: `update`, and the parts of
the default pipeline whose `Algorithm` versions a fused call (`update_rows_many`) relies on
(its ``update_index`` reaches `update_step` and `minimize`; no replay priorities)."""

_SCHEDULE_FIELDS = frozenset({"num_updates_per_train_iter", "mini_batch_size"})
"""The on-policy schedule's keys, once `Algorithm` class attributes, now the config's
(`cadence.algorithms.on_policy.OnPolicySchedule`)."""

Batch = dict[str, Any]
"""A batch of experience as `preprocess_experience` makes it: a dict of nests whose leaves
share their first dim (samples, or sequences ``[B, L, ...]``). A batch of sequences may
carry ``"initial_state"``: the recurrent state at each sequence's first step."""

GradientSync = Callable[[list[torch.Tensor]], None]
"""Called with the parameters of the optimizers about to step, after backward and before
clipping: a no-op in one process, an all-reduce of their ``.grad`` across ranks."""


class AlgStep(NamedTuple):
    """What a step function returns: ``output`` (e.g. the action), the next ``state``
    and ``info`` (a nest of ``[B, ...]`` tensors kept with the experience)."""

    output: Any
    state: Nest = ()
    info: Nest = ()


class LossInfo(NamedTuple):
    """A scalar ``loss`` to minimise and ``extra``: named scalar terms to log
    (``loss/*`` are the summed parts, everything else is a diagnostic)."""

    loss: torch.Tensor
    extra: dict[str, torch.Tensor]


class UpdateResult(NamedTuple):
    """What one `Algorithm.update` returns.

    Attributes:
        metrics: named 0-d tensors to log (``loss/*``, ``train/*``); never synced here.
        nonfinite: 0-d bool tensor, True when a loss or a gradient norm was NaN or inf.
        priorities: ``[N]`` new replay priorities of the minibatch's windows, or None.
    """

    metrics: dict[str, torch.Tensor]
    nonfinite: torch.Tensor
    priorities: torch.Tensor | None = None


class Algorithm(nn.Module, abc.ABC):
    """Base of all algorithms: step functions, loss, update and optimizers.

    Class attributes an algorithm sets when they apply are below. The update schedule is
    not among them: the run reads it from the algorithm config (an on-policy
    `cadence.algorithms.on_policy.OnPolicySchedule`, an off-policy `OffPolicyConfig`) and
    hands it to the scheme.

    Attributes:
        replay_fields: off-policy: the replay row keys `preprocess_experience` reads
            (``"time_step/observation"``, ``"action"``, ...); None gathers every field.
            Ignored when data transformers run first, since they may read any field.
        replays_state: off-policy: the replay rows keep the recurrent state each step
            started from (`cadence.replay.rows`); False for an algorithm that never reads
            it back (a replay restored from a run that stored it goes on storing it).
        max_grad_norm: clip each optimizer's gradients to this global norm (None: no clip).
        variable_batch_size: the minibatches' sizes vary from one to the next (so a
            compiled update compiles one graph for all sizes).
        skip_nonfinite_updates: set by the trainer when the user opts in
            (``trainer.skip_nonfinite_updates``): an update whose loss or gradients are
            NaN or infinite is not applied (`finite_or_dropped`), and the scheme counts it
            instead of averaging it in. Off, such an update stops the run.
        own_update: the class writes its own `update` (several losses or optimizers), or
            its own part of the default pipeline (`update_step`, `minimize` or
            `priorities`): `update_rows` calls `update` on each minibatch's rows, gathered
            eagerly, and the updates are never fused (`fuses_updates`). False, the default
            pipeline runs, with the rows gathered inside its graph. A class that defines
            any of those four methods without declaring ``own_update`` in its own body is
            taken to declare True; a subclass inherits its parent's declaration.
        may_stop_epochs: `stop_epochs` may ever return True: the on-policy scheme then
            checks it after each pass, rather than running the passes' updates together. A
            class that defines `stop_epochs` without declaring ``may_stop_epochs`` in its
            own body (a class attribute, or a property where it depends on the config) is
            taken to declare True.
    """

    replay_fields: Sequence[str] | None = None
    replays_state: bool = True
    max_grad_norm: float | None = None
    skip_nonfinite_updates: bool = False
    variable_batch_size: bool = False
    own_update: ClassVar[bool] = False
    may_stop_epochs: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        written = _OWN_UPDATE_METHODS.intersection(vars(cls))
        if written and "own_update" not in vars(cls):
            cls.own_update = True  # writing one declares it (docs/adding-an-algorithm.md)
        if "stop_epochs" in vars(cls) and "may_stop_epochs" not in vars(cls):
            cls.may_stop_epochs = True
        if moved := _SCHEDULE_FIELDS.intersection(vars(cls)):
            raise TypeError(
                f"{cls.__name__} sets {', '.join(sorted(moved))} as a class attribute, which "
                "no scheme reads: the on-policy schedule is the config's. Give the "
                "algorithm's config class these fields instead (docs/adding-an-algorithm.md)"
            )

    def __init__(self) -> None:
        super().__init__()
        self._gradient_sync: GradientSync | None = None
        self._accelerator: UpdateAccelerator | None = None
        self._optimizer_steps: OptimizerSteps | None = None

    # ------------------------------------------------------------ the seam
    def set_accelerator(self, accelerator: UpdateAccelerator | None) -> None:
        """Installs the accelerator of the update (None: eager, the default)."""
        self._accelerator = accelerator
        self._optimizer_steps = None

    @property
    def accelerator(self) -> UpdateAccelerator | None:
        """The update's accelerator (None: eager)."""
        return self._accelerator

    def in_graph(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``: through the accelerator where one is installed, else eagerly.

        ``fn`` is the pure part of an update: tensors in, tensors out, every Python value
        it reads fixed between calls (a non-tensor argument is part of a graph's key).
        Under a gradient-sync hook (several ranks) it runs eagerly.
        """
        if self._accelerator is None or self._gradient_sync is not None:
            return fn(*args)
        return self._accelerator.run(fn, *args)

    def optimizer_steps(self) -> OptimizerSteps:
        """Every optimizer of `optimizers`, stepped as one (by the accelerator's way where
        one is installed)."""
        if self._optimizer_steps is None:
            optimizers = list(self.optimizers().values())
            accelerator = self._accelerator
            self._optimizer_steps = (
                OptimizerSteps(optimizers)
                if accelerator is None
                else accelerator.optimizer_steps(optimizers)
            )
        return self._optimizer_steps

    # ------------------------------------------------------------------ acting
    def initial_state(self, batch_size: int) -> Nest:
        """The recurrent state of ``batch_size`` new episodes (``()`` when stateless)."""
        return ()

    @abc.abstractmethod
    def predict_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """Chooses actions for evaluation: ``output`` is the action nest ``[B, ...]``."""

    @abc.abstractmethod
    def rollout_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """Chooses exploratory actions during an unroll; ``info`` goes into the experience."""

    def as_agent(self) -> AlgorithmAgent:
        """This policy as an rlstructures `Agent` for the `cadence.collect.Batcher`
        (`cadence.algorithms.AlgorithmAgent`), where the algorithm's registration declares
        ``agent_view`` (PPO, A2C and SAC), whose class returns ``AlgorithmAgent(self)``.

        Raises:
            NotImplementedError: the algorithm offers none; the message names those that do.
        """
        from cadence.algorithms.registry import agent_view_algorithms

        raise NotImplementedError(
            f"{type(self).__name__} offers no agent view (as_agent); the algorithms that "
            f"declare one (agent_view) are: {', '.join(agent_view_algorithms())}"
        )

    # ---------------------------------------------------------------- learning
    @abc.abstractmethod
    def preprocess_experience(self, experience: Any) -> Batch:
        """An unroll (`cadence.data.Experience`, on-policy) or replayed windows
        (`cadence.replay.ReplaySample`, off-policy) as the batch `update` takes."""

    def train_step(self, inputs: Batch, state: Nest) -> AlgStep:
        """Recomputes what `calc_loss` needs on a minibatch."""
        raise NotImplementedError(f"{type(self).__name__} does not define train_step")

    def calc_loss(self, info: Nest) -> LossInfo:
        """The loss of a minibatch from its `train_step` info."""
        raise NotImplementedError(f"{type(self).__name__} does not define calc_loss")

    def update(self, batch: Batch) -> UpdateResult:
        """One minibatch: ``train_step -> calc_loss -> minimize -> after_update``, in
        one graph when compiled."""
        return self.in_graph(self.update_step, batch)

    def update_rows(self, batch: Batch, indices: torch.Tensor) -> UpdateResult:
        """`update` on the minibatch of ``batch``'s rows ``indices`` (dim 0 of every leaf).

        With the default `update` compiled, the rows are gathered inside the graph, where
        the gather fuses into the ops that read them: gathered eagerly, leaf by leaf, they
        cost 17 us of a 350 us compiled PPO update on CartPole.
        """
        if self.own_update:
            return self.update(select_rows(batch, indices))
        return self.in_graph(self._update_step_on_rows, batch, indices)

    def _update_step_on_rows(self, batch: Batch, indices: torch.Tensor) -> UpdateResult:
        return self.update_step(select_rows(batch, indices))

    @property
    def fuses_updates(self) -> bool:
        """Whether `update_rows_many` runs its updates as one accelerated call: the update is
        accelerated, in one process, the default pipeline as `Algorithm` writes it (the
        class declares no `own_update`), and no update may be skipped
        (`skip_nonfinite_updates`)."""
        return (
            not self.own_update
            and self._accelerator is not None
            and self._gradient_sync is None
            and not self.skip_nonfinite_updates
        )

    def update_rows_many(self, batch: Batch, indices: Sequence[torch.Tensor]) -> UpdateResult:
        """`update_rows` for each of ``indices`` in turn, as one compiled call where the
        algorithm `fuses_updates` (else one call each).

        A compiled call has a fixed cost in Python around its kernels (tens of
        microseconds on a CPU), a large part of a small network's update: PPO with 20
        updates per iteration of a 64x64 network on CartPole trained 400 iterations in
        2.0-2.15 s with 5 updates per call, 2.5 s with one per call.

        Returns:
            The updates' results stacked: every metric ``[K]`` and ``nonfinite`` ``[K]``,
            in the order of ``indices`` (`UpdateTotals.add` takes it as K updates).
        """
        indices = list(indices)
        if not indices:
            raise ValueError("update_rows_many needs at least one minibatch of indices")
        if self.fuses_updates:
            steps = len(indices)
            return self._accelerator.run(self._update_steps_on_rows, batch, indices, steps=steps)
        return stack_results([self.update_rows(batch, rows) for rows in indices])

    def _update_steps_on_rows(self, batch: Batch, indices: list[torch.Tensor]) -> UpdateResult:
        results = [
            self.update_step(select_rows(batch, rows), update_index=index)
            for index, rows in enumerate(indices)
        ]
        return stack_results(results)

    def update_step(self, batch: Batch, update_index: int = 0) -> UpdateResult:
        """The default `update`'s work; ``update_index``: its place among the updates of
        one compiled call (`update_rows_many`), passed on to `minimize`."""
        step = self.train_step(batch, batch.get("initial_state", ()))
        loss_info = self.calc_loss(step.info)
        grad_norm = self.minimize(loss_info.loss, update_index=update_index)
        self.after_update()
        return self.update_result(loss_info, grad_norm, self.priorities(step.info))

    def priorities(self, info: Nest) -> torch.Tensor | None:
        """``[N]`` new replay priorities from a minibatch's `train_step` info (None: keep)."""
        return None

    def after_update(self) -> None:
        """Runs after every optimizer step (target networks, counters)."""

    def set_progress(self, fraction: float) -> None:
        """Called before each iteration with the fraction of the env-step budget spent
        (learning-rate and exploration schedules)."""

    def stop_epochs(self, metrics: Mapping[str, float]) -> bool:
        """On-policy: whether to stop the passes over an unroll after the one that just
        ended, given the mean of every metric over that pass's updates (writing it declares
        `may_stop_epochs`)."""
        return False

    def summaries(self) -> dict[str, torch.Tensor]:
        """Videos to log at each evaluation, by TensorBoard tag: uint8 ``[T, H, W, 3]``
        (e.g. a world model's reconstructions); none by default."""
        return {}

    @abc.abstractmethod
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The algorithm's optimizers by name (checkpointed with it)."""

    # ------------------------------------------------------ the update's parts
    def set_gradient_sync(self, sync: GradientSync | None) -> None:
        """Installs the gradient-sync hook (None: none, the one-process default)."""
        self._gradient_sync = sync

    def sync_gradients(self, parameters: list[torch.Tensor]) -> None:
        """The gradient-sync hook: between backward and the optimizer steps."""
        if self._gradient_sync is not None:
            self._gradient_sync(parameters)

    def minimize(
        self,
        loss: torch.Tensor,
        optimizers: Sequence[torch.optim.Optimizer] | None = None,
        update_index: int = 0,
    ) -> torch.Tensor | None:
        """One step of ``optimizers`` (default: all) on ``loss``.

        zero_grad, backward, `sync_gradients`, clip each optimizer's gradients to
        `max_grad_norm`, step. ``update_index``: in an accelerated call of several updates
        (`update_rows_many`), which one this is (`UpdateAccelerator.minimize`); eager, unused.

        Returns:
            The largest gradient norm before clipping (0-d), or None without clipping.
        """
        optimizers = list(self.optimizers().values()) if optimizers is None else optimizers
        if torch.compiler.is_compiling():
            assert self._accelerator is not None, "a graph's minimize runs under an accelerator"
            return self._accelerator.minimize(
                loss, optimizers, self.max_grad_norm, self.skip_nonfinite_updates, update_index
            )
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = self.sync_and_clip(optimizers)
        if self.skip_nonfinite_updates:
            finite, grad_norm = self.finite_or_dropped(loss, optimizers, grad_norm)
            if not finite:
                return grad_norm
        for optimizer in optimizers:
            optimizer.step()
        return grad_norm

    def finite_or_dropped(
        self,
        loss: torch.Tensor,
        optimizers: Iterable[torch.optim.Optimizer],
        grad_norm: torch.Tensor | None,
    ) -> tuple[bool, torch.Tensor]:
        """For `skip_nonfinite_updates`: whether ``loss`` and the gradients are finite.

        One host sync (that is what skipping costs). When they are not, every gradient
        is dropped, so that no optimizer steps on them; the caller skips its step.

        Returns:
            whether the update may step, and the gradients' norm (computed here when
            ``grad_norm`` is None), which the update's result reports.
        """
        parameters = [p for optimizer in optimizers for p in _parameters(optimizer)]
        if grad_norm is None:
            grads = [p.grad for p in parameters if p.grad is not None]
            grad_norm = torch.nn.utils.get_total_norm(grads) if grads else loss.new_zeros(())
        finite = bool(torch.isfinite(loss.detach()) & torch.isfinite(grad_norm))
        if not finite:
            for parameter in parameters:
                parameter.grad = None
        return finite, grad_norm

    def sync_and_clip(self, optimizers: Iterable[torch.optim.Optimizer]) -> torch.Tensor | None:
        """`sync_gradients`, then each optimizer's gradients clipped to `max_grad_norm`.

        Returns:
            The largest norm before clipping, or None when there is no clipping.
        """
        if self._gradient_sync is None and self.max_grad_norm is None:
            return None  # the one-process, unclipped hot path builds no parameter lists
        groups = [_parameters(optimizer) for optimizer in optimizers]
        self.sync_gradients([p for group in groups for p in group])
        if self.max_grad_norm is None:
            return None
        norms = [nn.utils.clip_grad_norm_(group, self.max_grad_norm) for group in groups]
        return norms[0] if len(norms) == 1 else torch.stack(norms).max()

    @staticmethod
    def update_result(
        loss_info: LossInfo,
        grad_norm: torch.Tensor | None = None,
        priorities: torch.Tensor | None = None,
    ) -> UpdateResult:
        """The `UpdateResult` of one loss: its terms, ``loss/total``, ``train/grad_norm``."""
        metrics = {key: value.detach() for key, value in loss_info.extra.items()}
        metrics["loss/total"] = loss_info.loss.detach()
        nonfinite = ~torch.isfinite(metrics["loss/total"])
        if grad_norm is not None:
            metrics["train/grad_norm"] = grad_norm.detach()
            nonfinite = nonfinite | ~torch.isfinite(metrics["train/grad_norm"])
        return UpdateResult(metrics, nonfinite, priorities)

    # ------------------------------------------------------------------- state
    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Network parameters and buffers, every optimizer's state under ``optim/``, and
        under `ACCELERATOR_STATE_KEY` what the accelerator chose (when it chose)."""
        state = super().state_dict(*args, **kwargs)
        for name, optimizer in self.optimizers().items():
            state[f"optim/{name}"] = optimizer.state_dict()
        if self._accelerator is not None and self._accelerator.choices:
            state[ACCELERATOR_STATE_KEY] = dict(self._accelerator.choices)
        return state

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> Any:
        """Loads what `state_dict` gave; with ``strict=False``, any part of it.

        A part is what an acting copy gets (a `Batcher`'s workers get only the
        tensors): an optimizer whose state is absent keeps its own.
        """
        state_dict = dict(state_dict)
        choices = state_dict.pop(ACCELERATOR_STATE_KEY, None)
        if choices and self._accelerator is not None:
            self._accelerator.load_choices(choices)
        for name, optimizer in self.optimizers().items():
            if strict or f"optim/{name}" in state_dict:
                optimizer.load_state_dict(state_dict.pop(f"optim/{name}"))
        if self._accelerator is not None:
            self._accelerator.reattach()
        return super().load_state_dict(state_dict, strict=strict)


def stack_results(results: Sequence[UpdateResult]) -> UpdateResult:
    """Several updates' results as one: every metric and ``nonfinite`` stacked (``[K]``);
    priorities concatenated (None when any update keeps them)."""
    metrics = {key: torch.stack([r.metrics[key] for r in results]) for key in results[0].metrics}
    nonfinite = torch.stack([r.nonfinite for r in results])
    priorities = [r.priorities for r in results]
    kept = any(p is None for p in priorities)
    return UpdateResult(metrics, nonfinite, None if kept else torch.cat(priorities))


def select_rows(batch: Batch, indices: torch.Tensor) -> Batch:
    """``batch`` with every leaf's dim 0 indexed by ``indices``."""
    return map_structure(lambda x: x[indices], batch)


def reset_state(step_type: torch.Tensor, state: Nest, initial_state: Nest) -> Nest:
    """``state`` with the rows of FIRST steps replaced by ``initial_state``'s.

    Args:
        step_type: ``[B]`` step types.
        state: a nest of ``[B, ...]`` recurrent states.
        initial_state: the same nest, the state of new episodes.
    """
    first = step_type == StepType.FIRST

    def reset(current: torch.Tensor, initial: torch.Tensor) -> torch.Tensor:
        mask = first.reshape(first.shape + (1,) * (current.dim() - 1))
        return torch.where(mask, initial, current)

    return map_structure(reset, state, initial_state)


def _parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]
