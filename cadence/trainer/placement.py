"""Where a run's parts run: the learner, the policy that collects, and the environments.

``trainer.device`` places the learner (networks, optimizers, replay buffer, updates):
``auto`` is the GPU when there is one. ``trainer.collector_device`` places the policy that
acts in the environments:

- ``learner``: the learner's own networks act, on its device;
- ``auto``: the learner's device when the learner is on the CPU or the environments are
  tensor-native (they then run on the learner's device too, and the collector's time
  steps never leave it); otherwise, with Gymnasium environments on the CPU and the learner
  on a GPU, a measurement decides: one `rollout_step` on the env's batch, timed on each
  device with the transfers it implies. A small network over a few envs acts faster on the
  CPU, where a GPU would spend more on launching kernels and copying than on the math;
- a device (``cpu``, ``cuda``, ``cuda:1``): acts there.

When the collector's device differs from the learner's, the collector acts with a copy of
the algorithm refreshed from the learner before every unroll, and its experience moves to
the learner through pinned memory.

Torch's intra-op threads (``trainer.num_threads`` 0) are chosen per role, acting and
updating, from the work of one call (`role_threads`): a role whose call multiplies less
than `PARALLEL_MIN_FLOPS` runs on one thread, a larger one on every core torch was given.

The placement is written to the run directory (``placement.json``) and a resumed run
reuses it, so a measurement that came out differently on the second start cannot change
how the run collects, nor its thread counts.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import torch
from torch.utils.flop_counter import FlopCounterMode

from cadence.algorithms.algorithm import Algorithm
from cadence.data.nest import map_structure
from cadence.data.time_step import StepType, TimeStep

logger = logging.getLogger(__name__)

PLACEMENT_FILE = "placement.json"

REMOVED_FIELD = "cpu_matmul"
"""What multiplied the CPU layers' matrices, in the placement of earlier versions (``aten``,
``onednn`` or ``avx512``); read no more, but warned of (`warn_of_removed_matmuls`)."""

REMOVED_CPU_MATMULS = {"onednn": "oneDNN", "avx512": "cadence's AVX-512 matmul kernel"}
"""The removed backends a run may have recorded, by name."""


def learner_device(name: str) -> str:
    """The learner's device for ``trainer.device``: ``auto`` is ``cuda`` when a CUDA GPU is
    visible, else ``cpu``.

    Raises:
        RuntimeError: a CUDA device is asked for and this machine has none.
    """
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    _check_available(name, "trainer.device")
    return name


def _check_available(name: str, key: str) -> None:
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"{key}={name} but torch sees no CUDA GPU here (torch.cuda.is_available() is "
                f"False; torch {torch.__version__}); set {key}=auto or cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(
                f"{key}={name} but this machine has {torch.cuda.device_count()} CUDA GPU(s)"
            )


@attrs.frozen
class Placement:
    """Where a run's parts run.

    Attributes:
        learner: the learner's device.
        collector: the device the collecting policy acts on (time steps are delivered there).
        env: the device tensor-native environments run on (``cpu`` for Gymnasium ones).
        rollout_step_us: when ``auto`` measured it, one rollout step's microseconds per
            candidate device (transfers included); empty otherwise.
        num_threads: torch's intra-op threads (``torch.get_num_threads``) while the run
            updates and evaluates, which change how reductions round (0 in a placement
            recorded before it was part of one).
        acting_threads: torch's threads while the collector acts, where they are fewer
            (a small policy, or the cores env worker processes leave); 0: ``num_threads``.
    """

    learner: str
    collector: str
    env: str
    rollout_step_us: dict[str, float] = attrs.field(factory=dict)
    num_threads: int = 0
    acting_threads: int = 0

    @property
    def split(self) -> bool:
        """Whether the collector acts with a copy of the algorithm on another device."""
        return torch.device(self.collector) != torch.device(self.learner)

    def save(self, run_dir: Path) -> None:
        (run_dir / PLACEMENT_FILE).write_text(json.dumps(attrs.asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, run_dir: Path, warn: bool = True) -> Placement | None:
        """The placement recorded in ``run_dir``; None when there is none or it is damaged
        (then it is decided again, and rewritten, with a warning naming the file)."""
        path = run_dir / PLACEMENT_FILE
        if not path.exists():
            return None
        try:
            recorded = json.loads(path.read_text())
            if isinstance(recorded, dict):
                recorded.pop(REMOVED_FIELD, None)  # an earlier version's
            return cls(**recorded)
        except (ValueError, TypeError) as error:  # bad bytes, bad JSON, missing keys
            if warn:
                logger.warning(
                    "%s is damaged (%s: %s); deciding the placement again",
                    path, type(error).__name__, error,
                )  # fmt: skip
            return None

    def describe(self) -> str:
        text = f"learner on {self.learner}, policy acting on {self.collector}"
        if self.rollout_step_us:
            times = ", ".join(f"{us:.0f} us on {d}" for d, us in self.rollout_step_us.items())
            text += f" (one rollout step: {times})"
        if self.num_threads:
            text += f", {self.num_threads} torch thread(s)"
        if self.acting_threads:
            text += f" ({self.acting_threads} while acting)"
        return text


def first_placement(learner: str, collector: str, tensor_env: bool) -> Placement | None:
    """The placement decided without a measurement, or None when ``auto`` must measure
    (Gymnasium envs, the learner on an accelerator, ``collector_device=auto``)."""
    if collector == "learner" or (collector == "auto" and (tensor_env or learner == "cpu")):
        return Placement(learner, learner, learner if tensor_env else "cpu")
    if collector != "auto":
        _check_available(collector, "trainer.collector_device")
        return Placement(learner, collector, collector if tensor_env else "cpu")
    return None


def measured_placement(learner: str, algorithm: Algorithm, env: Any) -> Placement:
    """Times `rollout_step` on the CPU (with a copy of ``algorithm``) and on ``learner``
    (moving the time step there and the action back), and acts where it is faster."""
    times = {device: measure_rollout_step(algorithm, env, device) for device in ("cpu", learner)}
    collector = min(times, key=times.__getitem__)
    return Placement(learner, collector, "cpu", times)


def measure_rollout_step(algorithm: Algorithm, env: Any, device: str, repeats: int = 30) -> float:
    """The median microseconds of one `rollout_step` of ``algorithm`` (or of a copy of it
    on ``device``) on a CPU batch of ``env``'s size of zero observations, the move of the
    time step to ``device`` and of the action back to the CPU included.

    Neither ``algorithm``, ``env`` nor any random number generator is changed.
    """
    acting = algorithm
    if _device_of(algorithm) != torch.device(device):
        acting = copy.deepcopy(algorithm).to(device)
    batch_size = env.batch_size
    time_step = TimeStep(
        step_type=torch.full((batch_size,), StepType.MID),
        reward=torch.zeros(batch_size),
        discount=torch.ones(batch_size),
        observation=env.observation_spec.zeros((batch_size,)),
        prev_action=env.action_spec.zeros((batch_size,)),
        env_id=torch.arange(batch_size),
    )
    cuda = torch.device(device).type == "cuda"
    times = []
    with torch.random.fork_rng(devices=[torch.device(device)] if cuda else []), torch.no_grad():
        state = map_structure(lambda x: x.to(device), acting.initial_state(batch_size))
        for _ in range(repeats + 5):
            start = time.perf_counter()
            step = acting.rollout_step(time_step.to(device), state, ())
            map_structure(lambda x: x.to("cpu"), step.output)
            if cuda:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
    times = sorted(times[5:])
    return times[len(times) // 2] * 1e6


def _device_of(module: torch.nn.Module) -> torch.device:
    parameter = next(module.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


def resolve_placement(
    learner: str, collector: str, run_dir: Path, tensor_env: bool
) -> Placement | None:
    """The placement for a ``learner`` device and a ``collector`` setting decided without a
    measurement, or the one ``auto`` measured when this run started with the same learner
    (``run_dir/placement.json``); None when it must be measured, once the algorithm exists."""
    decided = first_placement(learner, collector, tensor_env)
    if decided is not None:
        return decided
    recorded = Placement.load(run_dir, warn=False)  # `record_placement` names a damaged one
    return recorded if recorded is not None and recorded.learner == learner else None


def warn_of_removed_matmuls(run_dir: Path) -> bool:
    """Warns when the run in ``run_dir`` recorded that oneDNN, or cadence's AVX-512 kernel,
    multiplied its CPU matrices (``cpu_matmul`` in the ``placement.json`` of an earlier
    version): both were removed, so the run goes on with torch's own BLAS and its numbers
    differ from the recorded ones. Returns whether it warned."""
    recorded = _removed_field(run_dir)
    if recorded not in REMOVED_CPU_MATMULS:
        return False
    logger.warning(
        "this run multiplied its CPU matrices with %s (cpu_matmul=%s in %s), which cadence "
        "no longer has: it continues with torch's own BLAS, so the numbers it computes from "
        "here on differ from the ones it recorded",
        REMOVED_CPU_MATMULS[recorded], recorded, run_dir / PLACEMENT_FILE,
    )  # fmt: skip
    return True


def _removed_field(run_dir: Path) -> Any:
    """`REMOVED_FIELD`'s value in ``run_dir``'s placement, or None where it has none."""
    try:
        return json.loads((run_dir / PLACEMENT_FILE).read_text()).get(REMOVED_FIELD)
    except (OSError, ValueError, AttributeError):  # none, damaged, or not a JSON object
        return None


PARALLEL_MIN_FLOPS = 1e9
"""The forward FLOPs of one call (an acting step over the env batch, or one update's
minibatch) from which a role runs on several intra-op threads (`role_threads`).

Torch's intra-op threads wait for each other at the end of every parallel operation by
spinning: when another process holds a core (a second run, a test suite, a browser), the
scheduler takes a core from one thread for a time slice of milliseconds while its
siblings spin waiting for it. An operation that takes microseconds then takes
milliseconds: on a 2-core Xeon that other jobs kept busy, SAC's update on [64, 64]
networks took 11 ms on one thread and 74-264 ms on two (``benchmarks/shared_machine.py``).
A gigaflop is 10-20 ms of one core's multiplies, split over the tens of layers of one
update: each operation is then about a time slice, so a descheduled sibling costs at most
about what the second thread gains, and a network that large (a CNN over a minibatch of
images) gains up to the core count on a free machine. Below it (MLPs, an RSSM stepping
a few dozen sequences) the gain on a free machine is a fraction, the loss on a busy one
a multiple, so one thread is the default. A declared threshold rather than a timing at
start: a measurement would follow the machine's load, and the thread count changes how
results round, so two runs of one seed would differ."""


@attrs.frozen
class ThreadCounts:
    """Torch's intra-op threads per role of a run.

    Attributes:
        updating: while the run updates and evaluates (the process's count).
        acting: while the collector acts (at most ``updating``).
    """

    updating: int
    acting: int


def forward_flops_per_row(algorithm: Algorithm, observation_spec: Any, action_spec: Any) -> int:
    """The FLOPs of one `rollout_step` of ``algorithm`` on one row of zero observations
    (multiplies and convolutions, counted by torch's ``FlopCounterMode``): what a row
    costs the networks, in acting and, per forward pass, in updates.

    Neither ``algorithm`` nor any random number generator is changed.
    """
    time_step = TimeStep(
        step_type=torch.full((1,), StepType.MID),
        reward=torch.zeros(1),
        discount=torch.ones(1),
        observation=observation_spec.zeros((1,)),
        prev_action=action_spec.zeros((1,)),
        env_id=torch.arange(1),
    )
    device = _device_of(algorithm)
    counter = FlopCounterMode(display=False)
    with torch.random.fork_rng(devices=[]), torch.no_grad(), counter:
        state = map_structure(lambda x: x.to(device), algorithm.initial_state(1))
        algorithm.rollout_step(time_step.to(device), state, ())
    return counter.get_total_flops()


def role_threads(flops_per_call: float, cores: int) -> int:
    """Torch's threads for a role whose calls multiply ``flops_per_call`` FLOPs: every one
    of ``cores`` from `PARALLEL_MIN_FLOPS`, else one."""
    return max(1, cores) if flops_per_call >= PARALLEL_MIN_FLOPS else 1


def choose_threads(
    flops_per_row: float, acting_rows: int, update_rows: int, cores: int, acting_cores: int
) -> ThreadCounts:
    """`ThreadCounts` for networks of ``flops_per_row`` acting on ``acting_rows`` rows and
    updating on minibatches of ``update_rows``: updates on `role_threads` of ``cores``,
    acting on those of ``acting_cores`` (the cores env worker processes leave), never more
    than the updates'."""
    updating = role_threads(flops_per_row * update_rows, cores)
    acting = min(updating, role_threads(flops_per_row * acting_rows, acting_cores))
    return ThreadCounts(updating, acting)


def resolve_threads(
    setting: int, run_dir: Path, choose: Callable[[], ThreadCounts], available: int
) -> ThreadCounts:
    """The run's `ThreadCounts` for ``trainer.num_threads``: a count above 0 for every
    role; with 0, those this run recorded when it started (``run_dir/placement.json``),
    so a run pre-empted on one machine and resumed on another continues with the numbers
    it would have had, else ``choose()``. A recorded count above the ``available`` cores
    is chosen again, with a warning.
    """
    if setting:
        return ThreadCounts(setting, setting)
    recorded = Placement.load(run_dir, warn=False)  # `record_placement` names a damaged one
    if recorded is None or not recorded.num_threads:
        return choose()
    if recorded.num_threads > available:
        chosen = choose()
        logger.warning(
            "this run trained with %d torch threads and this machine gives it %d cores: it "
            "continues with %d threads, so its numbers round differently from here on",
            recorded.num_threads, available, chosen.updating,
        )  # fmt: skip
        return chosen
    acting = recorded.acting_threads or recorded.num_threads
    logger.info(
        "resuming with the torch threads this run started with: %d updating, %d acting",
        recorded.num_threads, acting,
    )  # fmt: skip
    return ThreadCounts(recorded.num_threads, acting)


_warned_of_load = False


def warn_of_load(cores: int | None = None) -> bool:
    """Warns, once per process, when the machine's load (its one-minute average of
    runnable processes, ``os.getloadavg``) exceeds its ``cores`` (all of the machine's
    unless given): other work then competes for the cores and the run slows down. Returns
    whether it warned."""
    global _warned_of_load
    if _warned_of_load or not hasattr(os, "getloadavg"):
        return False
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load figure on this system
        return False
    cores = cores or os.cpu_count() or 1
    if load <= cores:
        return False
    _warned_of_load = True
    logger.warning(
        "this machine is busy: its load (%.1f runnable processes on average over the last "
        "minute) exceeds its %d cores, so the run shares them and trains slower; a run whose "
        "networks use several torch threads is the most slowed (trainer.num_threads=1 "
        "keeps it to one)",
        load, cores,
    )  # fmt: skip
    return True


def record_placement(placement: Placement, run_dir: Path, is_writer: bool) -> None:
    """Logs ``placement`` and writes it to ``run_dir`` (by the writing rank) unless the run
    already holds it (without an earlier version's `REMOVED_FIELD`, which a resume warns of
    once)."""
    logger.info("placement: %s", placement.describe())
    if is_writer and (Placement.load(run_dir) != placement or _removed_field(run_dir)):
        run_dir.mkdir(parents=True, exist_ok=True)
        placement.save(run_dir)
