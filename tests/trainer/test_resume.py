"""Resume is exact: a run killed with SIGKILL (or pre-empted with SIGUSR1) and
started again with the same command ends with the same metrics as an
uninterrupted run with the same seed."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cadence.trainer.metrics import read_metrics

TIMING_KEYS = ("wall_time", "train_time")

OVERRIDES = [
    "trainer.num_env_steps=12288",  # 48 iterations of 8 envs x 32 steps
    "trainer.checkpoint_interval=3",
    "trainer.eval_interval=6",
    "trainer.num_eval_episodes=3",
    "trainer.progress_bar=off",
    "seed=7",
]


def _command(root: Path, config: str = "ppo_cartpole") -> list[str]:
    return [sys.executable, "-m", "cadence.cli", "train", config, "--root-dir", str(root), *OVERRIDES]


def _comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS and not k.startswith("perf/")} for r in records]


def _latest_iteration(root: Path) -> int:
    latest = root / "checkpoints" / "LATEST"
    return int(latest.read_text()) if latest.exists() else 0


def _start_and_signal(root: Path, sig: int, after_iteration: int) -> subprocess.Popen:
    process = subprocess.Popen(_command(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _latest_iteration(root) < after_iteration:
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.01)
    process.send_signal(sig)
    process.wait(timeout=120)
    return process


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("uninterrupted") / "run"
    subprocess.run(_command(root), check=True, capture_output=True, timeout=600)
    assert (root / "COMPLETE").exists()
    return read_metrics(root)


def test_kill_9_then_restart_matches_an_uninterrupted_run(tmp_path, uninterrupted):
    root = tmp_path / "run"
    process = _start_and_signal(root, signal.SIGKILL, after_iteration=6)
    assert process.returncode == -signal.SIGKILL
    assert not (root / "COMPLETE").exists(), "the run finished before it could be killed"
    subprocess.run(_command(root), check=True, capture_output=True, timeout=600)
    assert (root / "COMPLETE").exists()
    assert _comparable(read_metrics(root)) == _comparable(uninterrupted)


def test_sigusr1_checkpoints_exits_0_and_resumes_exactly(tmp_path, uninterrupted):
    root = tmp_path / "run"
    process = _start_and_signal(root, signal.SIGUSR1, after_iteration=3)
    assert process.returncode == 0, process.stderr.read().decode()
    assert not (root / "COMPLETE").exists()
    interrupted_at = _latest_iteration(root)
    assert 3 <= interrupted_at < 48
    subprocess.run(_command(root), check=True, capture_output=True, timeout=600)
    assert _comparable(read_metrics(root)) == _comparable(uninterrupted)


def test_a_complete_run_is_not_trained_again(tmp_path, uninterrupted):
    root = tmp_path / "run"
    subprocess.run(_command(root), check=True, capture_output=True, timeout=600)
    before = (root / "metrics.jsonl").read_text()
    result = subprocess.run(_command(root), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0
    assert "complete" in (result.stdout + result.stderr).lower()
    assert (root / "metrics.jsonl").read_text() == before
