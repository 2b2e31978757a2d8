"""Gymnasium-Robotics goal tasks (the optional `robotics` extra; skipped without it):
FetchReach through make_env has a goal Dict observation and reports is_success, and
sac_her_fetchreach runs and logs rollout and eval success rates."""

import pytest

from cadence.config import load_config
from cadence.envs.make import make_env
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import train

pytest.importorskip("gymnasium_robotics", reason="the robotics extra is not installed")

FETCH_REACH = "gymnasium_robotics:FetchReach-v4"


def test_fetch_reach_has_a_goal_dict_and_reports_is_success():
    env = make_env(FETCH_REACH, num_envs=1, backend="serial", seed=0)
    try:
        spec = env.observation_spec
        assert set(spec) == {"observation", "achieved_goal", "desired_goal"}
        assert spec["achieved_goal"].shape == spec["desired_goal"].shape == (3,)
        assert "is_success" in env.reset().env_info
    finally:
        env.close()


def test_sac_her_fetchreach_runs_and_logs_success_rates(tmp_path):
    overrides = [
        f"root_dir={tmp_path / 'run'}",
        "trainer.progress_bar=off",
        "trainer.num_env_steps=200",
        "trainer.eval_interval=2",
        "trainer.summary_interval=1",
        "trainer.num_eval_episodes=2",
        "algorithm.off_policy.initial_collect_steps=100",
        "algorithm.off_policy.num_updates_per_train_iter=2",
    ]
    train(load_config("sac_her_fetchreach", overrides))
    records = read_metrics(tmp_path / "run")
    assert any(r.get("rollout/success_rate") is not None for r in records)
    assert any(r.get("eval/success_rate") is not None for r in records)
