"""Off-policy resume is exact, replay buffer included: a dqn_cartpole run stopped after its
checkpoint at iteration N and resumed to 2N logs the same metrics (losses, returns, episode
counts) and ends with the same networks and replay buffer as an uninterrupted run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cadence.algorithms.off_policy import OffPolicyScheme
from cadence.config import load_config
from cadence.trainer.checkpoint import CheckpointManager
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

N = 6  # iterations before the stop; the budget is 2N iterations of 2 envs x 16 steps

OVERRIDES = [
    "env.num_envs=2",
    "trainer.unroll_length=16",
    f"trainer.num_env_steps={2 * N * 32}",
    f"trainer.checkpoint_interval={N}",
    "trainer.eval_interval=4",
    "trainer.num_eval_episodes=2",
    "trainer.progress_bar=off",
    "network.hidden_sizes=[32]",
    "algorithm.n_step=2",
    "algorithm.target_update_period=3",  # not a multiple of the updates per iteration
    "algorithm.exploration_fraction=0.5",
    "algorithm.off_policy.mini_batch_length=3",
    "algorithm.off_policy.initial_collect_steps=64",
    "algorithm.off_policy.replay_buffer_length=100",  # the rings wrap before 2N
    "algorithm.off_policy.mini_batch_size=16",
    "algorithm.off_policy.num_updates_per_train_iter=4",
    "seed=3",
]

TIMING_KEYS = ("wall_time", "train_time")


class Crash(Exception):
    """Stands for the process dying at the start of iteration N + 1."""


def _comparable(records: list[dict]) -> list[dict]:
    return [
        {k: v for k, v in r.items() if k not in TIMING_KEYS and not k.startswith("perf/")}
        for r in records
    ]


def _train(root: Path, extra: list[str]) -> None:
    train(load_config("dqn_cartpole", [*OVERRIDES, *extra, f"root_dir={root}"]))


def _final_state(root: Path) -> dict:
    manager = CheckpointManager(root / "checkpoints")
    return manager.load(manager.latest())


def _assert_equal_nests(a, b, where: str = "") -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_equal_nests(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def _assert_same_run(resumed: Path, uninterrupted: Path) -> None:
    records = read_metrics(resumed)
    assert _comparable(records) == _comparable(read_metrics(uninterrupted))
    assert [r["iteration"] for r in records] == list(range(1, 2 * N + 1))
    assert any(r.get("loss/td") is not None for r in records)
    assert any(r.get("eval/episode_return") is not None for r in records[N:])
    assert records[-1]["rollout/num_episodes"] > 0
    state, reference = _final_state(resumed), _final_state(uninterrupted)
    assert state["counters"]["env_steps"] == 2 * N * 32
    assert int(state["scheme"]["replay_buffer"]["storage"]["num_added"][0]) == 2 * N * 16
    _assert_equal_nests(state["scheme"], reference["scheme"], "scheme")
    _assert_equal_nests(state["algorithm"], reference["algorithm"], "algorithm")


@pytest.mark.parametrize("prioritized", [False, True])
def test_stopped_at_n_and_resumed_to_2n_matches_an_uninterrupted_run(
    tmp_path, monkeypatch, prioritized
):
    extra = [f"algorithm.off_policy.prioritized_replay={str(prioritized).lower()}"]
    _train(tmp_path / "uninterrupted", extra)

    calls = []
    original = OffPolicyScheme.train_iter

    def dies_after_n(self):
        calls.append(None)
        if len(calls) > N:
            raise Crash
        return original(self)

    monkeypatch.setattr(OffPolicyScheme, "train_iter", dies_after_n)
    with pytest.raises(Crash):
        _train(tmp_path / "resumed", extra)
    monkeypatch.setattr(OffPolicyScheme, "train_iter", original)
    root = tmp_path / "resumed"
    assert (root / "checkpoints" / "LATEST").read_text() == f"{N:08d}"
    assert not (root / "COMPLETE").exists()
    _train(root, extra)
    assert (root / "COMPLETE").exists()
    _assert_same_run(root, tmp_path / "uninterrupted")


def _command(root: Path, budget: int) -> list[str]:
    overrides = [o for o in OVERRIDES if not o.startswith("trainer.num_env_steps")]
    return [
        sys.executable, "-m", "cadence.cli", "train", "dqn_cartpole", "--root-dir", str(root),
        *overrides, f"trainer.num_env_steps={budget}",
    ]  # fmt: skip


@pytest.mark.slow  # three processes: about a minute on a loaded 2-core machine
def test_a_process_killed_with_sigkill_after_a_checkpoint_resumes_exactly(tmp_path):
    # A longer budget, so the kill lands well before the end of the run.
    budget = 8 * N * 32
    subprocess.run(
        _command(tmp_path / "uninterrupted", budget), check=True, capture_output=True, timeout=600
    )
    root = tmp_path / "killed"
    process = subprocess.Popen(
        _command(root, budget), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    latest = root / "checkpoints" / "LATEST"
    deadline = time.monotonic() + 300
    while not latest.exists():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert not (root / "COMPLETE").exists(), "the run finished before it could be killed"
    killed_at = int(latest.read_text())
    assert N <= killed_at < 8 * N
    subprocess.run(_command(root, budget), check=True, capture_output=True, timeout=600)
    assert _comparable(read_metrics(root)) == _comparable(read_metrics(tmp_path / "uninterrupted"))
    _assert_equal_nests(
        _final_state(root)["scheme"], _final_state(tmp_path / "uninterrupted")["scheme"]
    )
