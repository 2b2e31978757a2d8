"""Resume is exact: a run killed with SIGKILL (or pre-empted with SIGUSR1) and
started again with the same command ends with the same metrics as an
uninterrupted run with the same seed."""

import signal
import subprocess
from pathlib import Path

import pytest

from cadence.testing.resume import (
    check_exact_resume,
    cli_train_command,
    comparable_metrics,
    signal_after_checkpoint,
)
from cadence.trainer.checkpoint import latest_iteration
from cadence.trainer.metrics import read_metrics

OVERRIDES = [
    "trainer.num_env_steps=6144",  # 24 iterations of 8 envs x 32 steps
    "trainer.checkpoint_interval=3",
    "trainer.eval_interval=6",
    "trainer.num_eval_episodes=3",
    "trainer.progress_bar=off",
    "seed=7",
]


def _command(root: Path, config: str = "ppo_cartpole") -> list[str]:
    return cli_train_command(config, root, OVERRIDES)


def _latest_iteration(root: Path) -> int:
    return latest_iteration(root / "checkpoints")


def _start_and_signal(root: Path, sig: int, after_iteration: int):
    return signal_after_checkpoint(_command(root), root, sig, after_iteration, timeout_s=120)


@pytest.fixture(scope="module")
def uninterrupted_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted") / "run"
    subprocess.run(_command(root), check=True, capture_output=True, timeout=600)
    assert (root / "COMPLETE").exists()
    return root


@pytest.fixture(scope="module")
def uninterrupted(uninterrupted_root) -> list[dict]:
    return read_metrics(uninterrupted_root)


def test_kill_9_then_restart_matches_an_uninterrupted_run(tmp_path, uninterrupted):
    root = tmp_path / "run"
    process = _start_and_signal(root, signal.SIGKILL, after_iteration=6)
    assert process.returncode == -signal.SIGKILL
    assert not (root / "COMPLETE").exists(), "the run finished before it could be killed"
    subprocess.run(_command(root), check=True, capture_output=True, timeout=600)
    assert (root / "COMPLETE").exists()
    assert comparable_metrics(read_metrics(root)) == comparable_metrics(uninterrupted)


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGINT], ids=["SIGUSR1", "Ctrl-C"])
def test_a_preemption_signal_checkpoints_exits_0_and_resumes_exactly(tmp_path, uninterrupted, sig):
    root = tmp_path / "run"
    process = _start_and_signal(root, sig, after_iteration=3)
    assert process.returncode == 0, process.stderr.read().decode()
    assert not (root / "COMPLETE").exists()
    interrupted_at = _latest_iteration(root)
    assert 3 <= interrupted_at < 24
    subprocess.run(_command(root), check=True, capture_output=True, timeout=600)
    assert comparable_metrics(read_metrics(root)) == comparable_metrics(uninterrupted)


def test_a_complete_run_is_not_trained_again(uninterrupted_root):
    root = uninterrupted_root
    before = (root / "metrics.jsonl").read_text()
    result = subprocess.run(_command(root), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0
    assert f"{root}: already complete" in result.stdout
    assert (root / "metrics.jsonl").read_text() == before


def test_a_mujoco_run_resumes_exactly(tmp_path):
    """A MuJoCo env pickles as its constructor's arguments: its simulation must be saved too."""
    overrides = [
        "env.num_envs=2",
        "trainer.unroll_length=32",
        "trainer.num_env_steps=256",  # 4 iterations; episodes end and reset within them
        "trainer.checkpoint_interval=2",
        "trainer.eval_interval=0",
        "trainer.progress_bar=off",
        "seed=5",
    ]
    check_exact_resume("ppo_hopper", overrides, tmp_path, stop_after=2)
