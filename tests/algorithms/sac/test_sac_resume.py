"""Off-policy resume is exact for SAC, replay buffer included: a sac_pendulum run stopped
after its checkpoint at iteration N and resumed to 2N logs the same metrics and ends with
the same networks, optimizers, temperature and replay buffer as an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cadence.algorithms.off_policy import OffPolicyScheme
from cadence.config import load_config
from cadence.trainer.checkpoint import CheckpointManager
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

N = 4  # iterations before the stop; the budget is 2N iterations of 2 envs x 16 steps

OVERRIDES = [
    "env.num_envs=2",
    "trainer.unroll_length=16",
    f"trainer.num_env_steps={2 * N * 32}",
    f"trainer.checkpoint_interval={N}",
    "trainer.eval_interval=3",
    "trainer.num_eval_episodes=2",
    "trainer.summary_interval=1",
    "trainer.progress_bar=off",
    "network.hidden_sizes=[32,32]",
    "algorithm.off_policy.initial_collect_steps=64",
    "algorithm.off_policy.replay_buffer_length=100",  # the rings wrap before 2N
    "algorithm.off_policy.mini_batch_size=16",
    "algorithm.off_policy.num_updates_per_train_iter=3",
    "seed=5",
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
    train(load_config("sac_pendulum", [*OVERRIDES, *extra, f"root_dir={root}"]))


def _final_state(root: Path) -> dict:
    manager = CheckpointManager(root / "checkpoints")
    return manager.load(manager.latest())


def _assert_equal_nests(a, b, where: str = "") -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_equal_nests(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_equal_nests(x, y, f"{where}/{i}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def _stop_after_n_then_resume(root: Path, extra: list[str], monkeypatch) -> None:
    calls = []
    original = OffPolicyScheme.train_iter

    def dies_after_n(self):
        calls.append(None)
        if len(calls) > N:
            raise Crash
        return original(self)

    monkeypatch.setattr(OffPolicyScheme, "train_iter", dies_after_n)
    with pytest.raises(Crash):
        _train(root, extra)
    monkeypatch.setattr(OffPolicyScheme, "train_iter", original)
    assert (root / "checkpoints" / "LATEST").read_text() == f"{N:08d}"
    assert not (root / "COMPLETE").exists()
    _train(root, extra)
    assert (root / "COMPLETE").exists()


def _assert_same_run(resumed: Path, uninterrupted: Path) -> None:
    records = read_metrics(resumed)
    assert _comparable(records) == _comparable(read_metrics(uninterrupted))
    assert sorted({r["iteration"] for r in records}) == list(range(1, 2 * N + 1))
    trained = [r for r in records[N:] if r.get("loss/critic") is not None]
    assert trained, "the second half must train (initial collection ends at iteration 2)"
    assert any(r.get("eval/episode_return") is not None for r in records[N:])
    state, reference = _final_state(resumed), _final_state(uninterrupted)
    assert int(state["scheme"]["replay_buffer"]["storage"]["num_added"][0]) == 2 * N * 16
    _assert_equal_nests(state["scheme"], reference["scheme"], "scheme")
    _assert_equal_nests(state["algorithm"], reference["algorithm"], "algorithm")
    assert "optim/alpha" in state["algorithm"] and "target_critic.mlp.0.weight" in state["algorithm"]


def test_sac_stopped_at_n_and_resumed_to_2n_matches_an_uninterrupted_run(tmp_path, monkeypatch):
    _train(tmp_path / "uninterrupted", [])
    _stop_after_n_then_resume(tmp_path / "resumed", [], monkeypatch)
    _assert_same_run(tmp_path / "resumed", tmp_path / "uninterrupted")


@pytest.mark.slow  # compiling the update takes a minute or two on a loaded 2-core machine
def test_compiled_sac_resumes_exactly_too(tmp_path, monkeypatch):
    extra = ["algorithm.compile=default"]
    _train(tmp_path / "uninterrupted", extra)
    _stop_after_n_then_resume(tmp_path / "resumed", extra, monkeypatch)
    _assert_same_run(tmp_path / "resumed", tmp_path / "uninterrupted")
