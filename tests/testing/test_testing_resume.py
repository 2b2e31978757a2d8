"""The exact-resume checks: they pass an exact resume and catch a resume that is not."""

from __future__ import annotations

import pytest
import torch

from cadence.algorithms.off_policy import OffPolicyScheme
from cadence.testing.resume import (
    assert_equal_nests,
    check_exact_resume,
    comparable_metrics,
    stop_and_resume,
)

N = 2

OVERRIDES = [
    "env.num_envs=2",
    "trainer.unroll_length=16",
    f"trainer.num_env_steps={2 * N * 32}",
    f"trainer.checkpoint_interval={N}",
    "trainer.eval_interval=2",
    "trainer.num_eval_episodes=1",
    "trainer.progress_bar=off",
    "network.hidden_sizes=[16]",
    "algorithm.off_policy.initial_collect_steps=32",
    "algorithm.off_policy.mini_batch_size=8",
    "seed=1",
]


def test_comparable_metrics_drops_only_what_measures_time():
    record = {"iteration": 1, "wall_time": 2.0, "train_time": 1.0, "perf/x": 3.0, "loss/td": 0.5}
    assert comparable_metrics([record]) == [{"iteration": 1, "loss/td": 0.5}]


def test_assert_equal_nests_names_the_first_difference():
    a = {"net": {"w": torch.zeros(2)}, "optim": [{"step": 1}], "n": 3}
    assert_equal_nests(a, {"net": {"w": torch.zeros(2)}, "optim": [{"step": 1}], "n": 3})
    with pytest.raises(AssertionError, match="root/net/w"):
        assert_equal_nests(a, {**a, "net": {"w": torch.ones(2)}}, "root")
    with pytest.raises(AssertionError, match="root/optim/0/step"):
        assert_equal_nests(a, {**a, "optim": [{"step": 2}]}, "root")
    with pytest.raises(AssertionError, match="keys differ"):
        assert_equal_nests(a, {"n": 3}, "root")


def test_an_exact_resume_passes_and_logs_every_iteration(tmp_path):
    run = check_exact_resume("dqn_cartpole", OVERRIDES, tmp_path, stop_after=N)
    assert [r["iteration"] for r in run.records] == list(range(1, 2 * N + 1))
    assert run.state["counters"]["iteration"] == 2 * N


def test_a_resume_that_perturbs_the_networks_is_caught(tmp_path, monkeypatch):
    load = OffPolicyScheme.read_checkpoint

    def perturbed_load(self, state, directory, files):
        load(self, state, directory, files)
        next(self.algorithm.parameters()).data.add_(1e-6)

    monkeypatch.setattr(OffPolicyScheme, "read_checkpoint", perturbed_load)
    with pytest.raises(AssertionError, match="differs after resume|algorithm/"):
        check_exact_resume("dqn_cartpole", OVERRIDES, tmp_path, stop_after=N)


def test_a_stop_between_checkpoints_is_refused_with_the_fix(tmp_path):
    with pytest.raises(AssertionError, match="checkpoint_interval divide stop_after"):
        stop_and_resume("dqn_cartpole", tmp_path / "run", OVERRIDES, stop_after=N + 1)
