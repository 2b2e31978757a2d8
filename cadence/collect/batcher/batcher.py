"""`Batcher`: agents acting in environments in worker processes, returning `Trajectories`.

Follows the batchers of rlstructures (Denoyer et al., 2021,
https://arxiv.org/abs/2102.01010): ``n_processes`` workers each run one agent over
``n_envs`` environments (`cadence.collect.batcher.worker`); `execute` starts an
acquisition of ``n_timesteps`` steps in all of them and returns at once, `get`
collects it. The workers write every step into one block of shared memory
(`cadence.collect.batcher.shared`), so an acquisition costs one small message each way per
worker; new weights go through shared memory too, stamped with a version
(`update`): nothing as large as a ``state_dict`` is pickled per update.

Seeding does not depend on the split into processes: env ``i`` of the whole batch
(``i = w * n_envs + k``) is seeded ``seed + i``, and an agent drawing from a `SlotRandom`
keyed by the observation's ``env_id`` gives slot ``i`` one stream wherever it runs
(worker ``w``'s agent is seeded ``seed + w * n_envs`` by `Agent.seed`, unless
``agent_seeds`` says otherwise, for generators of its own). So 1 x 2n and 2 x n envs
acquire the same trajectories, the agent's floats within rounding (the BLAS may round a
row of a batch of 2n differently from one of n), unless a step lies within rounding of
a tie; the same split repeats bit for bit.

Workers are started and watched with `cadence.envs.worker_pool` (the transport of
`ParallelEnvironment`), and from a script without an ``if __name__ ==
"__main__":`` guard they work as there: they never run the script, and what it
defines (the agent's class, an env factory) travels to them by value.

A worker that dies, or hangs past ``timeout_s`` and is killed, is restarted as
`cadence.envs.recovery` says for every worker pool, `ParallelEnvironment`'s too: a
warning names it; its slots' steps end at the last one written, marked as cut
(``done``, LAST with discount 1), and its rebuilt envs are seeded ``seed + i +
restarts * N``. Past ``max_worker_restarts`` within ``restart_window_s`` seconds,
`BatcherWorkerError` says so and the Batcher is unusable. An exception raised in env
or agent code reaches the caller as a `BatcherWorkerError` with the worker's
traceback; `reset` starts every slot again.

`get` takes the whole acquisition, or with ``min_slots`` only the workers that have
finished (asynchronous acquisition, as EnvPool steps envs): each worker's acquisition
is its own (`cadence.collect.batcher.acquisition`), with its weights version and
deadline, and `execute` starts the workers taken while the others go on. Recovery is the
same per worker; what it gives up is that one `get` may mix weights versions, and with
updates between gets what each slot acts on depends on timing.

With ``backend="ray"`` the workers are Ray actors (`cadence.collect.batcher.ray_backend`), which
may sit on other machines: the same protocol, seeds and fault policy, but each actor
returns its rows with its answer and weights go through Ray's object store.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from cadence.algorithms.agent import Agent
from cadence.collect.batcher.acquisition import (
    Acquisition,
    deadline,
    finished,
    read_trajectories,
    write_replies,
)
from cadence.collect.batcher.arguments import (
    Mode,
    agent_seeds_of,
    check_arguments,
    check_timeouts,
    per_slot,
)
from cadence.collect.batcher.errors import BatcherWorkerError, first_error, slot_range
from cadence.collect.batcher.shared import Specs, TrajectoryBlock, trajectory_fields
from cadence.collect.batcher.transport import Backend, StartMethod, make_pool
from cadence.collect.batcher.weights import WeightsPublisher, acting_weights
from cadence.collect.batcher.worker import WorkerRecipe, worker_main
from cadence.data.dict_tensor import DictTensor
from cadence.data.trajectories import Trajectories
from cadence.envs.environment import PyEnvironment
from cadence.envs.gym_factory import env_registrations
from cadence.envs.main_module import MainFree
from cadence.envs.recovery import RecoveryPolicy


class Batcher:
    """Runs an agent over ``n_processes * n_envs`` environments in worker processes.

    Args:
        n_timesteps: steps per slot of one acquisition (``T``).
        n_processes: worker processes.
        n_envs: environments (slots) per process.
        create_env: builds one environment, called in a worker as
            ``create_env(seed=seed + i, **env_args)`` for env ``i`` of the batch; a
            `cadence.envs.PyEnvironment` (`make_gym_env` builds a Gymnasium one).
        create_agent: builds the agent, called in each worker as ``create_agent(**agent_args)``.
        env_args: keyword arguments of ``create_env``.
        agent_args: keyword arguments of ``create_agent`` (the model to start from, ...).
        seed: env ``i`` is seeded ``seed + i``; worker ``w``'s agent is seeded
            ``seed + w * n_envs``, the seed of its first env (`Agent.seed`, called before
            the agent first acts).
        agent_seeds: one seed per worker for `Agent.seed`, instead (rlstructures'
            ``seeds``); ``None``: as ``seed`` says.
        agent_info: an example of the per-slot parameters (any number of rows): the
            workers run the agent on it once to learn the shapes of its outputs, and
            its first row is every slot's when `reset` is given none.
        env_info: an example of the per-slot environment parameters, recorded with
            each segment and given to each slot's env at every reset: a Gymnasium env
            (`make_gym_env`) as ``reset(options={"env_info": {key: row}})``, an env of
            another kind through `PyEnvironment.set_reset_options` (which ignores them
            unless it says otherwise); its first row is every slot's when `reset` is
            given none.
        mode: ``"continuing"``: an env whose episode ends starts the next one within
            the same acquisition (every slot runs ``T`` steps). ``"episodic"``: it stops
            there, until the next `reset` (rlstructures' envs without auto-reset).
            In both, an episode longer than ``T`` continues on the next `execute`.
        timeout_s: the longest a worker may take to answer an acquisition or a reset;
            one silent for longer has hung and is killed. ``None``: wait for ever.
        build_timeout_s: the longest a worker may take to start and build its envs and
            agent (at the start, and a replacement): a process importing torch takes
            seconds, and far longer on a busy machine. ``None``: wait for ever.
        max_worker_restarts: how often each worker may be restarted within any
            ``restart_window_s`` seconds (0: a dead worker is an error).
        restart_window_s: the window of ``max_worker_restarts``.
        start_method: how workers start (``"forkserver"``: forked from a server that
            has imported torch once, without the parent's threads); local back end only.
        backend: ``"local"``: worker processes on this machine, writing into shared
            memory. ``"ray"``: Ray actors (`cadence.collect.batcher.ray_backend`), which may sit
            on any node of a Ray cluster: each returns its rows with its answer, and
            new weights go through Ray's object store. Same seeds, same random
            streams and trajectories as the local back end (floats within rounding
            where the split differs, as between local splits). If Ray is not initialized, the Batcher calls
            ``ray.init()``, starting a local Ray instance; to use a cluster, call
            ``ray.init(address=...)`` before building the Batcher. Needs the ``ray``
            extra (``pip install 'cadence[ray]'``).
        ray_actor_options: Ray's options of each actor (``num_cpus``, ``resources``,
            a scheduling strategy; default one CPU each); ``"ray"`` back end only.

    >>> batcher = Batcher(  # doctest: +SKIP
    ...     n_timesteps=20, n_processes=2, n_envs=4, create_env=make_gym_env,
    ...     env_args={"name": "CartPole-v1"}, create_agent=MyAgent, agent_args={"model": model},
    ...     agent_info=DictTensor({"epsilon": torch.zeros(1)}))
    >>> batcher.reset(DictTensor({"epsilon": torch.full((8,), 0.1)}))  # doctest: +SKIP
    >>> batcher.execute()  # doctest: +SKIP
    >>> trajectories, n_running = batcher.get()  # doctest: +SKIP
    """

    def __init__(
        self,
        n_timesteps: int,
        n_processes: int,
        n_envs: int,
        create_env: Callable[..., PyEnvironment],
        create_agent: Callable[..., Agent],
        *,
        env_args: Mapping[str, Any] | None = None,
        agent_args: Mapping[str, Any] | None = None,
        seed: int = 0,
        agent_seeds: Sequence[int] | None = None,
        agent_info: DictTensor | None = None,
        env_info: DictTensor | None = None,
        mode: Mode = "continuing",
        timeout_s: float | None = 600.0,
        build_timeout_s: float | None = 300.0,
        max_worker_restarts: int = 3,
        restart_window_s: float = 600.0,
        start_method: StartMethod = "forkserver",
        backend: Backend = "local",
        ray_actor_options: Mapping[str, Any] | None = None,
    ):
        check_arguments(n_timesteps, n_processes, n_envs, mode, backend)
        check_timeouts(timeout_s=timeout_s, build_timeout_s=build_timeout_s)
        self._closed = False
        self.n_timesteps, self.n_processes, self.n_envs = n_timesteps, n_processes, n_envs
        self.mode = mode
        self.backend = backend
        self._n_slots = n_processes * n_envs
        self._seed, self._build_timeout_s = seed, build_timeout_s
        example = {} if agent_info is None else agent_info.to_dict()
        self._recipe = WorkerRecipe(
            create_env=create_env,
            env_args=dict(env_args or {}),
            create_agent=create_agent,
            agent_args=dict(agent_args or {}),
            n_envs=n_envs,
            n_timesteps=n_timesteps,
            seed=seed,
            agent_seeds=agent_seeds_of(agent_seeds, seed, n_processes, n_envs),
            agent_info=example,
            episodic=mode == "episodic",
            registrations=env_registrations((env_args or {}).values()),
        )
        # Pickled once, by value: what the user's script defines travels too (see
        # `cadence.envs.main_module`), and no tensor of agent_args is moved to shared
        # memory under the caller's model, as multiprocessing's own pickler would.
        self._packed_recipe = MainFree(self._recipe)
        self._examples = {"agent_info": agent_info, "env_info": env_info}
        self._init_state()
        try:
            self._pool = make_pool(backend, n_processes, timeout_s, start_method, ray_actor_options)
            self._recovery = self._recovery_policy(max_worker_restarts, restart_window_s)
            self._start_workers()
        except BaseException:
            self.close()
            raise

    def _init_state(self) -> None:
        """The state of no acquisition yet: no blocks, no weights, every slot to reset."""
        self._block: TrajectoryBlock | None = None
        self._weights = WeightsPublisher(ray=self.backend == "ray")
        self._agent_info = DictTensor({}, batch_size=self._n_slots)
        self._env_info = DictTensor({}, batch_size=self._n_slots)
        self._running = np.zeros(self._n_slots, dtype=bool)  # slots that will act next
        self._needs_reset = True
        self._in_flight: dict[int, Acquisition] = {}  # worker -> what its execute started
        self._stale_info: set[int] = set()  # workers not yet given the latest agent_info

    def _start_workers(self) -> None:
        """Starts every worker, lays out the trajectory block from the specs they report,
        and attaches them to it."""
        for worker in self._workers:
            self._spawn(worker)
        specs = self._gather_specs(self._workers)
        fields = trajectory_fields(specs, self._n_slots, self.n_timesteps)
        self._block = TrajectoryBlock(fields, shared=self.backend == "local")
        self._worker_fields = trajectory_fields(specs, self.n_envs, self.n_timesteps)
        replies, dead = self._pool.request({w: self._attach_message() for w in self._workers})
        if dead:
            worker = min(dead)
            raise self._recovery.lost_while_building(worker, self._pool.reap(worker))
        self._raise_errors(replies, while_building=True)
        self._recovery.built = True

    def _recovery_policy(self, max_restarts: int, window_s: float) -> RecoveryPolicy:
        """The shared worker-recovery policy (`cadence.envs.recovery`), worded for slots."""
        return RecoveryPolicy(
            self._pool,
            owner="Batcher",
            worker_kind="batcher worker",
            batch_size=self._n_slots,
            max_restarts=max_restarts,
            window_s=window_s,
            hosted=lambda w: f"hosting slots {slot_range(self._env_ids(w))}",
            cut="the steps of its slots end at the last one written, marked as cut (LAST, "
            "discount 1)",
            make_error=lambda message, w, hung: BatcherWorkerError(
                message, w, self._env_ids(w), died=True
            ),
            building="while the Batcher was being built",
            build_timeout="build_timeout_s",
        )

    # -- the public protocol -------------------------------------------------------------------

    @property
    def n_slots(self) -> int:
        """``n_processes * n_envs``, the slots (environments) of the whole batch."""
        return self._n_slots

    @property
    def weights_version(self) -> int:
        """The version of the latest `update` (0 before any)."""
        return self._weights.version

    @property
    def restarts(self) -> list[int]:
        """How often each worker has been restarted after dying (or hanging)."""
        return list(self._recovery.restarts)

    @property
    def processes(self) -> list[Any]:
        """The workers: worker ``w`` hosts slots ``w * n_envs`` to ``(w + 1) * n_envs - 1``.

        Local processes; with Ray, `cadence.collect.batcher.ray_backend.RayActor` records (the
        actor's handle, pid and host)."""
        return list(self._pool.processes)

    def reset(
        self, agent_info: DictTensor | None = None, env_info: DictTensor | None = None
    ) -> None:
        """Starts an episode in every env and the agent's initial state in every slot.

        Args:
            agent_info: ``[N, ...]`` per-slot parameters (``N = n_slots``), kept for
                the acquisitions that follow until `execute` gives new ones (``None``:
                the first row of the constructor's example in every slot).
            env_info: ``[N, ...]`` per-slot environment parameters, recorded with
                every segment and given to each slot's env at this reset and every later
                one (see the constructor; ``None``: as ``agent_info``).

        Raises:
            RuntimeError: workers are still acquiring (`get` takes them all).
            BatcherWorkerError: env or agent code raised (with the worker's traceback).
        """
        self._check_usable()
        if self._in_flight:
            raise RuntimeError(
                f"workers {sorted(self._in_flight)} are still acquiring: get() them all "
                "(get() without min_slots waits for every one) before reset()"
            )
        self._agent_info = self._per_slot(agent_info, "agent_info")
        self._env_info = self._per_slot(env_info, "env_info")
        self._needs_reset = True
        messages = {w: ("reset", self._reset_infos(w)) for w in self._workers}
        while messages:
            replies, dead = self._pool.request(messages)
            for worker in sorted(dead):  # the replacement is reset below
                self._recover(worker, self._pool.reap(worker), resume=False)
            self._raise_errors(replies)
            messages = {w: messages[w] for w in dead}
        self._running[:] = True
        self._needs_reset = False
        self._stale_info.clear()

    def execute(self, agent_info: DictTensor | None = None) -> None:
        """Starts an acquisition of up to ``n_timesteps`` steps per running slot; returns at once.

        Only the workers not in flight start: after a `get` that took some workers
        (``min_slots``), those start again with the latest weights while the others go
        on undisturbed.

        Args:
            agent_info: ``[N, ...]`` new per-slot parameters from now on (``None``: the
                last ones); a worker in flight gets them at its next start.

        Raises:
            RuntimeError: no `reset` yet (or since an error), every worker in flight, or
                (episodic mode) no slot left running.
        """
        self._check_usable()
        if self._needs_reset:
            raise RuntimeError("call reset() before execute() (and after a worker's error)")
        if len(self._in_flight) == self.n_processes:
            raise RuntimeError("every worker is in flight already: get() first")
        if not self._running.any():
            raise RuntimeError("every episode has ended (episodic mode): call reset()")
        if agent_info is not None:
            self._agent_info = per_slot(
                agent_info, self._examples["agent_info"], self._n_slots, "agent_info"
            )
            self._stale_info = set(self._workers)
        weights = self._weights.message()
        idle = [w for w in self._workers if w not in self._in_flight]
        workers = [w for w in idle if self._running[self._slots(w)].any()]
        messages = {}
        for w in workers:
            info = self._slice_of(self._agent_info, w) if w in self._stale_info else None
            self._stale_info.discard(w)
            messages[w] = ("execute", (info, weights))
            slots = self._slots(w)
            self._in_flight[w] = Acquisition(
                slots=slots.start + np.flatnonzero(self._running[slots]),
                version=self._weights.version,
                agent_info=self._agent_info,
                deadline=deadline(self._pool.timeout_s),
            )
            # A worker that dies before it writes leaves no rows: they read as zero
            # steps, not as its last acquisition's.
            self._block.arrays["progress"][slots] = 0
        self._pool.send(messages)

    def get(
        self, blocking: bool = True, min_slots: int | None = None
    ) -> tuple[Trajectories | None, int | None]:
        """The acquisitions of the workers that finished, and how many slots are running.

        Without ``min_slots``, every worker in flight: the acquisition `execute` started.
        With it, only the workers that have finished, once they hold at least
        ``min_slots`` slots (or every slot in flight, if fewer); the others go on, and a
        later `get` takes them (asynchronous acquisition: see docs/agents.md).

        Args:
            blocking: wait; ``False`` returns ``(None, None)`` until enough are done.
            min_slots: how many slots the workers taken must hold at least (>= 1);
                ``None``: all those in flight.

        Returns:
            The segments of the slots taken (in slot order), ``[B, T']`` with ``T' <=
            n_timesteps`` the longest of them, ``info["env_id"]`` the slot of each and
            ``info["weights_version"]`` the weights it ran on; and the number of slots
            running (episodic mode: those whose episode goes on, counting the slots
            still in flight).

        Raises:
            RuntimeError: no acquisition in flight.
            ValueError: ``min_slots`` < 1.
            BatcherWorkerError: env or agent code raised, or a worker died past its restarts.
        """
        self._check_usable()
        if not self._in_flight:
            raise RuntimeError("no acquisition in flight: call execute() first")
        if min_slots is not None and min_slots < 1:
            raise ValueError(f"min_slots must be >= 1 (or None: every slot), got {min_slots}")
        count = self._n_slots if min_slots is None else min_slots
        workers = finished(self._pool, self._in_flight, count, blocking)
        if not workers:
            return None, None
        taken, dead = self._take(workers)
        cut = [self._slots(w) for w in dead]
        trajectories = read_trajectories(self._block.arrays, taken, self._env_info, cut)
        return trajectories, int(self._running.sum())

    def update(self, weights: Mapping[str, torch.Tensor]) -> int:
        """Gives the workers new weights (e.g. a ``state_dict``), from their next `execute` on.

        Safe while workers are in flight: each goes on with the weights it started with,
        recorded per segment in ``info["weights_version"]``.

        Args:
            weights: tensors by name, the same names, shapes and dtypes every time;
                each worker's agent gets them (a copy) through `Agent.update`. Entries
                that are not tensors stay behind (see `acting_weights`), so an
                algorithm's whole ``state_dict()`` may be given.

        Returns:
            The new version (1 for the first update).

        Raises:
            TypeError: ``weights`` holds no tensor.
        """
        self._check_usable()
        tensors = acting_weights(weights)
        return self._weights.publish(tensors, self._loading_versions)

    def close(self) -> None:
        """Stops the workers and frees the shared memory; idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if hasattr(self, "_pool"):
            self._pool.stop()
        if getattr(self, "_weights", None) is not None:
            self._weights.close()
        if getattr(self, "_block", None) is not None:
            self._block.close(unlink=True)
        self._block = None

    def __enter__(self) -> Batcher:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down modules
            pass

    # -- workers -------------------------------------------------------------------------------

    @property
    def _workers(self) -> range:
        return range(self.n_processes)

    def _slots(self, worker: int) -> slice:
        return slice(worker * self.n_envs, (worker + 1) * self.n_envs)

    def _slice_of(self, values: DictTensor, worker: int) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in values[self._slots(worker)].to_dict().items()}

    def _reset_infos(self, worker: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """What a reset gives ``worker``: its slots' ``agent_info`` and ``env_info`` rows."""
        return self._slice_of(self._agent_info, worker), self._slice_of(self._env_info, worker)

    def _spawn(self, worker: int) -> None:
        offset = self._recovery.seed_offset(worker)
        args = (worker, worker * self.n_envs, self._packed_recipe, offset)
        if self.backend == "ray":
            self._pool.spawn(worker, args)
        else:
            self._pool.spawn(worker, worker_main, args)

    def _gather_specs(self, workers: range | list[int]) -> Specs:
        replies, dead = self._pool.gather(workers, self._build_timeout_s)
        if dead:
            worker = min(dead)
            raise self._recovery.lost_while_building(worker, self._pool.reap(worker))
        self._raise_errors(replies, while_building=True)
        return next(payload for _, payload in replies.values())

    def _attach_message(self) -> tuple[str, Any]:
        if self.backend == "ray":  # a private block of the worker's own rows
            return ("attach", (None, self._worker_fields))
        return ("attach", (self._block.name, self._block.fields))

    def _take(self, workers: list[int]) -> tuple[list[Acquisition], set[int]]:
        """Takes the answers of finished ``workers`` and the slots still running.

        Returns:
            Their acquisitions, in slot order, and those of them that died.
        """
        taken, replies, dead = self._collect(workers, resume=self.mode == "continuing")
        if any(status == "error" for status, _ in replies.values()):
            self._drain()  # reset() then finds none in flight, as after a lockstep error
        self._raise_errors(replies)
        for worker, (_, still_running) in replies.items():
            slots = self._slots(worker)
            self._running[slots] = False
            self._running[slots.start + np.asarray(still_running, dtype=np.int64)] = True
        return taken, dead

    def _collect(
        self, workers: list[int], resume: bool
    ) -> tuple[list[Acquisition], dict[int, Any], set[int]]:
        """Takes finished ``workers`` out of the flight, killing those past their deadline,
        and recovers the dead.

        Returns:
            Their acquisitions, their replies (in the local back end's form) and the dead.
        """
        now = time.monotonic()
        overdue = any(self._in_flight[w].overdue(now) for w in workers)
        replies, dead = self._pool.gather(workers, 0.0 if overdue else None)
        taken = [self._in_flight.pop(w) for w in workers]
        if self.backend == "ray":
            replies = write_replies(self._block.arrays, replies, self._slots)
        for worker in sorted(dead):
            # One that hung had the whole timeout since its execute(), not what remained.
            hung = self._pool.hung_for(worker) is not None
            self._recover(worker, self._hung() if hung else self._pool.reap(worker), resume)
        return taken, replies, dead

    def _drain(self) -> None:
        """Waits for every worker still in flight and drops what it acquired."""
        if self._in_flight:
            self._collect(finished(self._pool, self._in_flight, self._n_slots, True), False)

    def _loading_versions(self) -> set[int]:
        """The weights versions a worker in flight may still be loading (local back end).

        A worker loads its weights before its first step, so one that has written a step
        or answered has them; one past its deadline is killed, as `get` kills it.
        """
        if self.backend == "ray" or not self._in_flight:
            return set()  # with Ray each version is an object of its own
        now, progress = time.monotonic(), self._block.arrays["progress"]
        answered, loading = self._pool.ready(self._in_flight), set()
        for w, acquisition in self._in_flight.items():
            if w in answered or progress[self._slots(w)].any():
                continue
            if acquisition.overdue(now):
                self._pool.kill(w, self._hung())
            else:
                loading.add(acquisition.version)
        return loading

    def _hung(self) -> str:
        return f"hung (no answer within {self._pool.timeout_s:g} s of execute(); killed)"

    def _recover(self, worker: int, how: str, resume: bool) -> None:
        """Replaces dead ``worker`` as the recovery policy says (else raises); with ``resume``
        its slots start new episodes, else they wait for the next reset.

        Args:
            worker: the dead worker.
            how: how it ended, `WorkerPool.reap`'s predicate (``"died (exit code 3)"``).
            resume: whether its slots run on (continuing mode) or wait for a reset.
        """
        ready = functools.partial(self._ready, resume=resume)
        self._recovery.recover(worker, how, self._spawn, ready)

    def _ready(self, worker: int, resume: bool) -> bool:
        """Builds and attaches ``worker``'s replacement (and resets it with ``resume``);
        False if it died meanwhile."""
        replies, dead = self._pool.gather([worker], self._build_timeout_s)
        if not dead:
            self._raise_errors(replies, while_building=True)
            messages = [self._attach_message()]
            if resume:
                messages.append(("reset", self._reset_infos(worker)))
            for message in messages:
                replies, dead = self._pool.request({worker: message})
                if dead:
                    break
                self._raise_errors(replies)
        if not dead:
            self._running[self._slots(worker)] = resume
        return not dead

    def _raise_errors(self, replies: dict[int, Any], while_building: bool = False) -> None:
        error = first_error(replies, self._env_ids, while_building)
        if error is not None and while_building:
            self._recovery.broken = str(error)
        elif error is not None:
            self._needs_reset = True
        if error is not None:
            raise error

    def _env_ids(self, worker: int) -> list[int]:
        return list(range(self._slots(worker).start, self._slots(worker).stop))

    def _per_slot(self, values: DictTensor | None, what: str) -> DictTensor:
        return per_slot(values, self._examples[what], self._n_slots, what)

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("the Batcher is closed")
        broken = self._recovery.broken
        if broken is not None:
            raise RuntimeError(f"the Batcher is unusable since a worker failed: {broken}")
