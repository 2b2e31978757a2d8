"""The `Batcher`'s Ray back end: its workers as Ray actors, anywhere in a Ray cluster.

`RayWorkerPool` stands where `cadence.envs.worker_pool.WorkerPool` stands for the
local back end, with the same calls (`spawn`, `send`, `ready`, `gather`, `request`,
`reap`, `hung_for`, `stop`), so the `Batcher`'s protocol, restart budget and error
reporting are the same code for both. What differs is what a worker can share with
the parent: an actor may sit on another machine, so

- it keeps its rows of an acquisition in a private block and returns them with its
  answer (`RayBatcherWorker`), and the `Batcher` writes them into its own block in
  the layout the local back end's workers write in place;
- new weights go through Ray's object store, put once per `Batcher.update` and
  fetched by each actor the first time an acquisition names their version.

Each actor runs the local back end's `Acquirer` (the same envs, seeds and per-step
logic), so both back ends acquire the same trajectories for the same seeds (split alike,
bit for bit; split otherwise, as any two splits: see `cadence.collect.batcher.batcher`).
A dead actor (its process gone, its node lost) is reported as a dead worker, and
one silent past ``timeout_s`` is killed with ``ray.kill``; `ready` waits with
``ray.wait``. Ray is imported here only, when a Batcher asks for it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from cadence.collect.batcher.worker import Acquirer, WorkerRecipe, attempt, unpack_recipe
from cadence.envs.main_module import MainFree

Reply = tuple[str, Any]


class RayBatcherWorker:
    """The body of one Ray actor: a `Batcher` worker's envs and agent (an `Acquirer`).

    Args:
        worker: the worker's index.
        start: the index of its first env in the whole batch.
        recipe: its envs and agent (in a `MainFree`).
        seed_offset: added to every seed (see `batcher_worker.worker_main`).
    """

    def __init__(self, worker: int, start: int, recipe: WorkerRecipe | MainFree, seed_offset: int):
        torch.set_num_threads(1)
        self.worker = worker
        self.build_reply, self.acquirer = attempt(
            lambda: Acquirer(unpack_recipe(recipe), start, seed_offset)
        )
        self.weights_version = -1

    def started(self) -> tuple[Reply, int, str]:
        """The build's reply (``("ok", specs)`` or an error), the pid and the host's name."""
        reply = ("ok", self.acquirer.specs) if self.acquirer is not None else self.build_reply
        return reply, os.getpid(), socket.gethostname()

    def handle(self, command: str, arg: Any) -> Reply:
        """Serves one request as `batcher_worker.worker_main` does; an ``"execute"`` loads
        the weights it names (``([object ref], version)``) and answers with the slots still
        running and the rows it wrote (`Acquirer.rows_written`)."""
        if command == "execute":
            agent_info, weights = arg
            reply, _ = attempt(functools.partial(self._load_weights, weights))
            if reply[0] == "error":
                return reply
            reply, running = attempt(
                functools.partial(self.acquirer.handle, command, (agent_info, None))
            )
            if reply[0] == "error":
                return reply
            return "ok", (running, self.acquirer.rows_written())
        reply, _ = attempt(functools.partial(self.acquirer.handle, command, arg))
        return reply

    def close(self) -> None:
        if self.acquirer is not None:
            self.acquirer.close()
            self.acquirer = None

    def _load_weights(self, weights: tuple[list[Any], int] | None) -> None:
        if weights is None or weights[1] == self.weights_version:
            return
        import ray

        (ref,), version = weights
        self.acquirer.agent.update(ray.get(ref))
        self.weights_version = version


@dataclasses.dataclass
class RayActor:
    """A worker of the Ray back end: its actor handle and where it runs (once started)."""

    handle: Any
    pid: int | None = None
    host: str | None = None


class RayWorkerPool:
    """``num_workers`` Ray actors answering one request at a time each.

    Args:
        num_workers: the number of worker slots.
        timeout_s: the longest wait for a worker's answer to a request; an actor silent
            for longer is killed and reported as dead. ``None``: wait for ever.
        actor_options: Ray's options of each actor (``num_cpus``, ``resources``, a
            scheduling strategy); by default one CPU each.

    Calls ``ray.init()`` (a local Ray instance) when Ray is not initialized yet.
    """

    def __init__(
        self,
        num_workers: int,
        timeout_s: float | None,
        actor_options: Mapping[str, Any] | None = None,
    ):
        import ray

        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s}")
        if not ray.is_initialized():
            ray.init()
        self._ray = ray
        options = {"num_cpus": 1, "max_restarts": 0, **dict(actor_options or {})}
        self._actor_class = ray.remote(RayBatcherWorker).options(**options)
        self.timeout_s = timeout_s
        self.processes: list[RayActor | None] = [None] * num_workers
        self._pending: dict[int, tuple[Any, bool]] = {}  # worker -> (ref, is the start)
        self._hung: dict[int, float | None] = {}
        self._died: dict[int, str] = {}

    def spawn(self, worker: int, args: tuple[Any, ...]) -> None:
        """Starts ``RayBatcherWorker(*args)`` as worker ``worker`` (killing the one there);
        its first answer is the build's (`RayBatcherWorker.started`)."""
        if self.processes[worker] is not None:
            self._ray.kill(self.processes[worker].handle, no_restart=True)
        self._hung.pop(worker, None)
        self._died.pop(worker, None)
        handle = self._actor_class.remote(*args)
        self.processes[worker] = RayActor(handle)
        self._pending[worker] = (handle.started.remote(), True)

    def send(self, messages: dict[int, Any]) -> None:
        """Sends each worker its ``(command, arg)`` without waiting."""
        for worker, (command, arg) in messages.items():
            actor = self.processes[worker].handle
            self._pending[worker] = (actor.handle.remote(command, arg), False)

    def ready(self, workers: Iterable[int], timeout_s: float | None = 0.0) -> set[int]:
        """Those of ``workers`` whose answer (or death) is in.

        Args:
            workers: the workers to look at.
            timeout_s: how long to wait for the first of them; ``0``: not at all;
                ``None``: for ever. An empty set means it ran out.
        """
        refs = {self._pending[w][0]: w for w in workers}
        if not refs:
            return set()
        if timeout_s != 0:
            self._ray.wait(list(refs), num_returns=1, timeout=timeout_s)
        done, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=0)
        return {refs[ref] for ref in done}

    def gather(
        self, workers: Iterable[int], timeout_s: float | None = None
    ) -> tuple[dict[int, Reply], set[int]]:
        """Waits for a reply or the death of each of ``workers``.

        Args:
            workers: the workers to wait for.
            timeout_s: the longest wait; the actors still silent then are killed and
                counted dead (see `hung_for`). ``None``: wait for ever.
        """
        refs = {self._pending[w][0]: w for w in workers}
        if not refs:
            return {}, set()
        done, late = self._ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        replies: dict[int, Reply] = {}
        dead: set[int] = set()
        for ref in done:
            worker = refs[ref]
            try:
                answer = self._ray.get(ref)
            except self._ray.exceptions.RayError as error:
                self._died[worker] = _first_line(error)
                dead.add(worker)
                continue
            _, is_start = self._pending.pop(worker)
            if is_start:
                answer, pid, host = answer
                self.processes[worker].pid, self.processes[worker].host = pid, host
            replies[worker] = answer
        for ref in late:
            worker = refs[ref]
            self._hung[worker] = timeout_s
            self._ray.kill(self.processes[worker].handle, no_restart=True)
            dead.add(worker)
        return replies, dead

    def request(self, messages: dict[int, Any]) -> tuple[dict[int, Reply], set[int]]:
        """`send`, then `gather` within ``timeout_s``."""
        self.send(messages)
        return self.gather(messages, self.timeout_s)

    def reap(self, worker: int) -> str:
        """How dead ``worker`` ended, as a predicate (``"died (...)"``, ``"hung (...)"``)."""
        if worker in self._hung:
            return f"hung (no answer within {self._hung[worker]:g} s; killed with ray.kill)"
        return f"died (its Ray actor is gone: {self._died.get(worker, 'no reason given')})"

    def hung_for(self, worker: int) -> float | None:
        """The wait that dead ``worker`` outlasted before it was killed (``None``: it died)."""
        return self._hung.get(worker)

    def stop(self) -> None:
        """Closes every actor's envs and agent, then ends the actors."""
        closing = []
        for actor in self.processes:
            if actor is not None:
                closing.append(actor.handle.close.remote())
        if closing:
            self._ray.wait(closing, num_returns=len(closing), timeout=_CLOSE_TIMEOUT_S)
        for actor in self.processes:
            if actor is not None:
                self._ray.kill(actor.handle, no_restart=True)
        self.processes = [None] * len(self.processes)
        self._pending.clear()


_CLOSE_TIMEOUT_S = 5.0


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}".strip()
