"""A second Ctrl-C stops `cadence train` at once with one line, not a traceback: the run
stopped without a final checkpoint, and the checkpoint the same command resumes from."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest

from cadence import cli
from cadence.testing.resume import cli_train_command
from cadence.trainer import run as trainer_run
from cadence.trainer.checkpoint import latest_iteration
from cadence.trainer.preemption import interrupted_note

# Iterations of a few seconds (800 small updates each), so that a second Ctrl-C sent
# right after the first arrives while the iteration the first one waits for still runs.
SLOW_ITERATIONS = [
    "env.num_envs=2",
    "trainer.unroll_length=16",
    "algorithm.mini_batch_size=8",
    "algorithm.num_updates_per_train_iter=800",
    "algorithm.compile=off",
    "trainer.num_threads=1",
    "trainer.num_env_steps=100000",
    "trainer.eval_interval=1000",
    "trainer.checkpoint_interval=1",
    "trainer.progress_bar=off",
]
FIRST_CTRL_C = "Ctrl-C: checkpointing after this iteration"


class _Lines:
    """Collects a pipe's lines in a thread, so that the test can wait for one."""

    def __init__(self, pipe):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe) -> None:
        for line in iter(pipe.readline, ""):
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, process: subprocess.Popen, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in self.lines):
            assert process.poll() is None, "\n".join(self.lines)
            assert time.monotonic() < deadline, f"no {text!r} in {timeout_s} s"
            time.sleep(0.01)

    def join(self) -> list[str]:
        self._thread.join(timeout=30)
        return self.lines


def _default_sigint() -> None:
    # A shell's background job inherits SIGINT ignored, and Python keeps it ignored: the
    # training process gets SIGINT's default, as a terminal's foreground job would.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.timeout(300)
def test_a_second_ctrl_c_prints_one_line_naming_the_checkpoint_to_resume_from(tmp_path):
    root = tmp_path / "run"
    process = subprocess.Popen(
        cli_train_command("ppo_cartpole", root, SLOW_ITERATIONS),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    stderr = _Lines(process.stderr)
    try:
        # Logged once published: iteration 2 runs now (a Ctrl-C sent while iteration 1's
        # checkpoint is written would find the run stopping cleanly after it).
        stderr.wait_for("checkpoints/00000001 written", process, timeout_s=240)
        process.send_signal(signal.SIGINT)
        stderr.wait_for(FIRST_CTRL_C, process, timeout_s=60)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        process.kill()
    lines = stderr.join()
    saved = latest_iteration(root / "checkpoints")
    checkpoint = root / "checkpoints" / f"{saved:08d}"
    assert lines[-1] == (
        f"cadence train: interrupted: {root} stopped without a final checkpoint; the same "
        f"command resumes it from {checkpoint} (iteration {saved})"
    )
    assert not any("Traceback" in line or "KeyboardInterrupt" in line for line in lines)
    assert not (root / "COMPLETE").exists()


def test_the_note_says_when_there_is_no_checkpoint_yet(tmp_path):
    assert interrupted_note(tmp_path / "run") == (
        f"interrupted: {tmp_path / 'run'} stopped before its first checkpoint; "
        "the same command starts it anew"
    )


def test_an_interrupted_train_command_exits_130_with_one_line(tmp_path, monkeypatch, capsys):
    def interrupted(config, resume_with_changes=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer_run, "train", interrupted)
    root = tmp_path / "run"
    assert cli.main(["train", "ppo_cartpole", "--root-dir", str(root)]) == 130
    err = capsys.readouterr().err.splitlines()
    assert err == [f"cadence train: {interrupted_note(root)}"]
