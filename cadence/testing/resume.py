"""Exact-resume checks for any named config (DESIGN §8, test kind 4).

A run stopped after its checkpoint at iteration N and resumed to the end must log
the same metrics and end with the same algorithm and training-scheme state
(networks, optimizers, replay buffer, counters of updates) as an uninterrupted run
with the same seed. `check_exact_resume` does the whole check for one named config;
the pieces are public so a test can stop a run another way (a real ``SIGKILL`` with
`signal_after_checkpoint`) and still compare with `comparable_metrics`,
`final_state` and `assert_equal_nests`.

>>> overrides = ["env.num_envs=2", "trainer.unroll_length=16", "trainer.num_env_steps=128",
...              "trainer.checkpoint_interval=2", "trainer.progress_bar=off"]
>>> run = check_exact_resume("ppo_cartpole", overrides, tmp_path, stop_after=2)  # doctest: +SKIP
>>> run.records[-1]["iteration"]  # doctest: +SKIP
4
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from cadence.algorithms.off_policy_config import off_policy_config
from cadence.config import load_config
from cadence.config.loading import check_overrides
from cadence.replay.persistence import snapshot_state
from cadence.trainer.checkpoint import CheckpointManager, latest_iteration
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train
from cadence.trainer.trainer import Outcome, Trainer

__all__ = [
    "TINY_DREAMER_PENDULUM",
    "ResumedRun",
    "SimulatedCrash",
    "assert_close_states",
    "assert_equal_nests",
    "check_exact_resume",
    "check_kill_resume_and_extend",
    "cpu_sized_overrides",
    "cli_train_command",
    "comparable_metrics",
    "crash_after",
    "final_state",
    "signal_after_checkpoint",
    "stop_and_resume",
    "train_named",
]

TIMING_KEYS = ("wall_time", "train_time")
"""Metric keys that measure time, hence differ between two runs of one seed (as ``perf/*``)."""

TINY_DREAMER_PENDULUM = [
    "trainer.unroll_length=50",
    "env.max_episode_steps=60",
    "algorithm.off_policy.initial_collect_steps=200",
    "algorithm.off_policy.mini_batch_size=4",
    "algorithm.off_policy.mini_batch_length=10",
    "algorithm.off_policy.num_updates_per_train_iter=2",
    "algorithm.actor_critic.num_start_states=16",
    "algorithm.actor_critic.horizon=5",
]
"""Overrides that make ``dreamer_pendulum`` a run of seconds: iterations of 50 agent steps
(100 env steps at action repeat 2), two updates each from the third on, on 4 sequences
of 10 steps, imagining 5 steps from 16 start states."""


class SimulatedCrash(Exception):
    """Stands for the process dying at the start of an iteration."""


@dataclasses.dataclass
class ResumedRun:
    """What `check_exact_resume` found, for further algorithm-specific assertions.

    Attributes:
        records: the resumed run's ``metrics.jsonl`` records, in order.
        state: the resumed run's final checkpoint.
        reference_state: the uninterrupted run's final checkpoint.
    """

    records: list[dict[str, Any]]
    state: dict[str, Any]
    reference_state: dict[str, Any]


def comparable_metrics(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without what measures time (`TIMING_KEYS` and ``perf/*``)."""
    return [
        {k: v for k, v in r.items() if k not in TIMING_KEYS and not k.startswith("perf/")}
        for r in records
    ]


def final_state(run_dir: Path) -> dict[str, Any]:
    """The latest checkpoint of the run in ``run_dir``, loaded on the CPU and verified.

    A replay buffer the checkpoint holds as chunk files is read back into
    ``state["scheme"]["replay_buffer"]`` (a `ReplayBuffer.state_dict`), so that two runs'
    states compare as wholes.
    """
    manager = CheckpointManager(Path(run_dir) / "checkpoints")
    path = manager.latest()
    files = manager.verify(path)
    state = manager.load(path)
    data = path / "data"
    if (data / "meta.pt").is_file():
        digests = {k.removeprefix("data/"): v for k, v in files.items() if k.startswith("data/")}
        state["scheme"]["replay_buffer"] = snapshot_state(data, digests)
    return state


def assert_close_states(
    expected: torch.nn.Module, actual: torch.nn.Module, atol: float = 1e-6
) -> None:
    """Checks that two algorithms' state dicts have the same keys, in the same order, and
    every tensor (parameters, buffers, optimizer state) equal within float rounding: e.g.
    an eager and a compiled copy after the same updates (`assert_equal_nests` asks for
    bit-equality, as a resumed run must give).

    Args:
        expected: the reference algorithm (e.g. the eager copy).
        actual: the algorithm checked against it.
        atol: absolute tolerance of parameters and buffers (a deep model's rounding
            grows through its layers); optimizer state is held to 1e-6.

    Raises:
        AssertionError: the keys differ, or a tensor differs beyond the tolerances.
    """
    expected_state, actual_state = expected.state_dict(), actual.state_dict()
    assert list(expected_state) == list(actual_state)  # no `_orig_mod.` or any other new key
    for key, value in expected_state.items():
        if key.startswith("optim/"):
            for slot, state in value["state"].items():
                for name, tensor in state.items():
                    # Adam's step counts may live on the CPU or the GPU (CUDA graphs)
                    torch.testing.assert_close(
                        actual_state[key]["state"][slot][name],
                        tensor,
                        rtol=1e-4,
                        atol=1e-6,
                        check_device=False,
                    )
        else:
            torch.testing.assert_close(actual_state[key], value, rtol=1e-4, atol=atol)


def assert_equal_nests(a: Any, b: Any, where: str = "") -> None:
    """Checks that two nests of dicts, lists, tensors and plain values are exactly equal.

    Args:
        a: a nest, e.g. a checkpoint's ``state["algorithm"]``.
        b: the nest it must equal (same keys, lengths, tensors ``torch.equal``).
        where: the path of ``a`` in its container, for the message.

    Raises:
        AssertionError: naming the path of the first leaf or key set that differs.
    """
    if isinstance(a, dict):
        if a.keys() != b.keys():
            raise AssertionError(f"{where}: keys differ: {sorted(a)} vs {sorted(b)}")
        for key in a:
            assert_equal_nests(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise AssertionError(f"{where}: lengths differ: {len(a)} vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equal_nests(x, y, f"{where}/{i}")
    elif isinstance(a, torch.Tensor):
        if not torch.equal(a, b):
            raise AssertionError(f"{where}: tensors differ")
    elif a != b:
        raise AssertionError(f"{where}: {a!r} != {b!r}")


def train_named(config_name: str, run_dir: Path, overrides: Sequence[str] = ()) -> Outcome | None:
    """Trains the named config with ``overrides`` in ``run_dir`` (resuming a run there)."""
    check_overrides(overrides)
    return train(load_config(config_name, [*overrides, f"root_dir={run_dir}"]))


@contextlib.contextmanager
def crash_after(iterations: int) -> Iterator[None]:
    """Within it, every `Trainer` raises `SimulatedCrash` at the start of iteration
    ``iterations + 1``, as if the process died there."""
    # Patched on the class: `train` builds its Trainer where a test cannot reach it.
    calls = []
    original = Trainer._iteration

    def dies_after(self, *args, **kwargs):
        calls.append(None)
        if len(calls) > iterations:
            raise SimulatedCrash
        return original(self, *args, **kwargs)

    with mock.patch.object(Trainer, "_iteration", dies_after):
        yield


def stop_and_resume(
    config_name: str, run_dir: Path, overrides: Sequence[str], stop_after: int
) -> None:
    """Trains until a crash at the start of iteration ``stop_after + 1``, then resumes to the end.

    Args:
        config_name: a named config (`cadence.config.list_configs`).
        run_dir: the run directory (new).
        overrides: config overrides; ``trainer.checkpoint_interval`` must divide ``stop_after``.
        stop_after: the iteration after whose checkpoint the run dies.

    Raises:
        AssertionError: the stopped run's latest checkpoint is not ``stop_after``, it was
            marked complete, or the resumed run did not complete.
    """
    run_dir = Path(run_dir)
    with crash_after(stop_after):
        try:
            train_named(config_name, run_dir, overrides)
        except SimulatedCrash:
            pass
        else:
            raise AssertionError(
                f"the run ended before iteration {stop_after + 1}; raise its budget"
            )
    latest = latest_iteration(run_dir / "checkpoints")
    if latest != stop_after:
        raise AssertionError(
            f"the stopped run's latest checkpoint is {latest}, not {stop_after}: "
            "make trainer.checkpoint_interval divide stop_after"
        )
    if (run_dir / "COMPLETE").exists():
        raise AssertionError("a run that died was marked COMPLETE")
    train_named(config_name, run_dir, overrides)
    if not (run_dir / "COMPLETE").exists():
        raise AssertionError("the resumed run did not complete")


def check_exact_resume(
    config_name: str, overrides: Sequence[str], work_dir: Path, stop_after: int
) -> ResumedRun:
    """Checks that stopping after iteration ``stop_after`` and resuming changes nothing.

    Trains ``config_name`` uninterrupted in ``work_dir/uninterrupted``, and stopped at
    ``stop_after`` then resumed (`stop_and_resume`) in ``work_dir/resumed``; the two
    must log the same metrics (bar timings) and end with equal ``scheme`` and
    ``algorithm`` checkpoint state.

    Args:
        config_name: a named config (`cadence.config.list_configs`).
        overrides: config overrides shared by both runs (keep the runs small).
        work_dir: an empty directory for the two runs.
        stop_after: the iteration after whose checkpoint the run dies.

    Returns:
        The resumed run's records and both final states.

    Raises:
        AssertionError: naming the first metric record or state entry that differs.
    """
    uninterrupted, resumed = Path(work_dir) / "uninterrupted", Path(work_dir) / "resumed"
    train_named(config_name, uninterrupted, overrides)
    stop_and_resume(config_name, resumed, overrides, stop_after)
    records, reference = read_metrics(resumed), read_metrics(uninterrupted)
    for i, (got, want) in enumerate(
        zip(comparable_metrics(records), comparable_metrics(reference), strict=False)
    ):
        if got != want:
            raise AssertionError(f"metrics record {i} differs after resume: {got} vs {want}")
    if len(records) != len(reference):
        raise AssertionError(
            f"{len(records)} metrics records after resume, {len(reference)} without"
        )
    state, reference_state = final_state(resumed), final_state(uninterrupted)
    assert_equal_nests(state["scheme"], reference_state["scheme"], "scheme")
    assert_equal_nests(state["algorithm"], reference_state["algorithm"], "algorithm")
    return ResumedRun(records, state, reference_state)


def cli_train_command(config_name: str, run_dir: Path, overrides: Sequence[str]) -> list[str]:
    """The ``cadence train`` command line of a named config, for a separate process."""
    return [
        sys.executable, "-m", "cadence.cli", "train", config_name, "--root-dir", str(run_dir),
        *overrides,
    ]  # fmt: skip


def signal_after_checkpoint(
    command: Sequence[str],
    run_dir: Path,
    sig: int = signal.SIGKILL,
    after_iteration: int = 1,
    timeout_s: float = 300.0,
) -> subprocess.Popen:
    """Starts ``command``, sends it ``sig`` once it checkpointed ``after_iteration``, waits.

    Args:
        command: a training command line (`cli_train_command`) writing to ``run_dir``.
        run_dir: its run directory, watched for ``checkpoints/LATEST``.
        sig: the signal (``SIGKILL`` for a crash, ``SIGUSR1`` for pre-emption).
        after_iteration: the iteration the latest checkpoint must reach first.
        timeout_s: how long to wait for that checkpoint (and for the exit, capped at 120 s).

    Returns:
        The exited process (its ``stderr`` is a pipe).

    Raises:
        AssertionError: the process exited, or no such checkpoint came within ``timeout_s``.
    """
    # A shell's background job inherits SIGINT ignored, and Python keeps it ignored: the
    # training process gets SIGINT's default, as a terminal's foreground job would.
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_default_sigint,
    )
    checkpoints = Path(run_dir) / "checkpoints"
    deadline = time.monotonic() + timeout_s
    while latest_iteration(checkpoints) < after_iteration:
        if process.poll() is not None:
            raise AssertionError(f"the run exited first: {process.stderr.read().decode()}")
        if time.monotonic() >= deadline:
            process.kill()
            raise AssertionError(f"no checkpoint of iteration {after_iteration} in {timeout_s} s")
        time.sleep(0.005)
    process.send_signal(sig)
    process.wait(timeout=min(timeout_s, 120.0))
    return process


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cpu_sized_overrides(config_name: str, iterations: int = 4) -> list[str]:
    """Overrides that make any named config a run of seconds on a CPU, deterministic on
    one machine: ``iterations`` iterations of 2 envs x 4 steps (serial back end, one torch
    thread, aten matmuls, no compiling), a one-episode evaluation every second iteration
    and a checkpoint every iteration, off-policy updates from the second iteration on
    small minibatches, a world model of a few units. The env, algorithm, network kind and
    data transformers are the config's own.
    """
    config = load_config(config_name)
    budget = iterations * 8 * config.env.action_repeat
    overrides = [
        "env.num_envs=2",
        "env.backend=serial",
        "env.max_episode_steps=10",
        "trainer.unroll_length=4",
        f"trainer.num_env_steps={budget}",
        "trainer.summary_interval=1",
        "trainer.eval_interval=2",  # each evaluation builds its env: seconds for DMC's
        "trainer.num_eval_episodes=1",
        "trainer.checkpoint_interval=1",
        "trainer.progress_bar=off",
        "trainer.num_threads=1",
    ]
    algorithm = config.algorithm
    if hasattr(algorithm, "mini_batch_size"):
        overrides.append("algorithm.mini_batch_size=4")
    if getattr(algorithm, "compile", "off") != "off":
        overrides.append("algorithm.compile=off")  # compiling alone takes a minute
    overrides += _small_model_overrides(algorithm)
    off_policy = off_policy_config(algorithm)
    if off_policy is not None:
        overrides += [
            f"algorithm.off_policy.initial_collect_steps={8 * config.env.action_repeat}",
            "algorithm.off_policy.mini_batch_size=4",
            f"algorithm.off_policy.mini_batch_length={min(off_policy.mini_batch_length, 4)}",
            "algorithm.off_policy.num_updates_per_train_iter=1",
            "algorithm.off_policy.replay_buffer_length=64",
        ]
    return overrides


def _small_model_overrides(algorithm: Any) -> list[str]:
    """A world model and its policy learner of a few units, for the model-based configs
    (the paper-sized ones take minutes an iteration on a CPU); [] for the others."""
    world_model = getattr(algorithm, "world_model", None)
    if world_model is None:
        return []
    overrides = [
        f"algorithm.world_model.{key}={16 if key.endswith('belief_size') else 4}"
        for key in (f"{group}_{kind}" for group in "xyz" for kind in ("belief_size", "state_size"))
        if getattr(world_model, key) > 0
    ]
    overrides += [
        "algorithm.world_model.hidden_size=16",
        "algorithm.world_model.mlp_hidden_size=16",
    ]
    if getattr(algorithm, "actor_critic", None) is not None:
        overrides += [
            "algorithm.actor_critic.hidden_size=16",
            "algorithm.actor_critic.horizon=3",
            "algorithm.actor_critic.num_start_states=8",
        ]
    if getattr(algorithm, "sac", None) is not None:
        overrides.append("algorithm.sac.hidden_size=16")
    return overrides


def _with_budget(overrides: Sequence[str], budget: int) -> list[str]:
    kept = [o for o in overrides if not o.startswith("trainer.num_env_steps=")]
    return [*kept, f"trainer.num_env_steps={budget}"]


def check_kill_resume_and_extend(
    config_name: str, overrides: Sequence[str], work_dir: Path, timeout_s: float = 300.0
) -> dict[str, Any]:
    """Kills a ``cadence train`` of ``config_name`` with SIGKILL after its first checkpoint,
    runs the same command again, and extends the finished run by one iteration.

    The resumed run must log the metrics of an uninterrupted run and end in its state,
    where the env state was saved (see `Returns`); it must complete either way, and the
    extension (``--resume-with-changes``, a budget one iteration larger) must too.

    Args:
        config_name: a named config.
        overrides: its overrides, with a checkpoint every iteration and at least three
            iterations (`cpu_sized_overrides`).
        work_dir: an empty directory for the runs.
        timeout_s: how long the killed run may take to reach its first checkpoint.

    Returns:
        ``{"config", "env_state_saved", "iterations", "seconds"}``: whether the
        checkpoints hold the env state (if not, only completion is checked), the
        extended run's iterations, and the wall time of the whole check.

    Raises:
        AssertionError: naming what differs or did not complete.
    """
    start = time.monotonic()
    work_dir = Path(work_dir)
    uninterrupted, resumed = work_dir / "uninterrupted", work_dir / "resumed"
    train_named(config_name, uninterrupted, overrides)
    process = signal_after_checkpoint(
        cli_train_command(config_name, resumed, overrides), resumed, timeout_s=timeout_s
    )
    if process.returncode != -signal.SIGKILL or (resumed / "COMPLETE").exists():
        raise AssertionError(
            f"{config_name}: the run ended before the kill (exit {process.returncode}); "
            "give it more iterations"
        )
    if train_named(config_name, resumed, overrides) != "complete":
        raise AssertionError(f"{config_name}: the run started again did not complete")
    state, reference_state = final_state(resumed), final_state(uninterrupted)
    saved = reference_state["env"] is not None
    if saved:
        records, reference = read_metrics(resumed), read_metrics(uninterrupted)
        if comparable_metrics(records) != comparable_metrics(reference):
            raise AssertionError(
                f"{config_name}: the metrics after kill -9 and resume differ from an "
                f"uninterrupted run's:\n{comparable_metrics(records)}\nvs\n"
                f"{comparable_metrics(reference)}"
            )
        assert_equal_nests(state["scheme"], reference_state["scheme"], "scheme")
        assert_equal_nests(state["algorithm"], reference_state["algorithm"], "algorithm")
    iterations = int(state["counters"]["iteration"])
    budget = int(state["counters"]["env_steps"]) // iterations * (iterations + 1)
    config = load_config(config_name, [*_with_budget(overrides, budget), f"root_dir={resumed}"])
    if train(config, resume_with_changes=True) != "complete":
        raise AssertionError(f"{config_name}: the extended run did not complete")
    extended = int(final_state(resumed)["counters"]["iteration"])
    if extended != iterations + 1:
        raise AssertionError(f"{config_name}: extended to iteration {extended}")
    return {
        "config": config_name,
        "env_state_saved": saved,
        "iterations": extended,
        "seconds": round(time.monotonic() - start, 1),
    }


def _main(argv: Sequence[str]) -> None:
    """``python -m cadence.testing.resume CONFIG WORK_DIR RESULT_JSON``: runs
    `check_kill_resume_and_extend` with `cpu_sized_overrides` in a process of its own."""
    name, work_dir, result = argv
    outcome = check_kill_resume_and_extend(name, cpu_sized_overrides(name), Path(work_dir))
    Path(result).write_text(json.dumps(outcome))


if __name__ == "__main__":
    _main(sys.argv[1:])
