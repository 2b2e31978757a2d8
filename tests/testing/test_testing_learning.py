"""train_to_bar and EvalCurve: what a learning test reads back from a run."""

import os
import signal

import pytest

from cadence.testing import learning
from cadence.testing.learning import EvalCurve, train_to_bar

OVERRIDES = [
    "seed=0",
    "env.num_envs=2",
    "trainer.unroll_length=16",
    "trainer.num_env_steps=128",
    "trainer.eval_interval=2",
    "trainer.num_eval_episodes=1",
]


def test_eval_curve_finds_the_first_evaluation_at_the_bar():
    curve = EvalCurve(env_steps=[100, 200, 300], returns=[-500.0, -150.0, -180.0], budget=300)
    assert curve.best_return == -150.0
    assert curve.env_steps_to(-200) == 200
    assert curve.env_steps_to(-100) is None


def test_train_to_bar_reads_back_every_evaluation(tmp_path):
    curve = train_to_bar("dqn_cartpole", tmp_path / "run", 475, OVERRIDES)
    assert curve.env_steps == [64, 128] and curve.budget == 128
    assert all(r >= 1 for r in curve.returns)  # a CartPole episode earns 1 per step


def test_a_pre_empted_run_is_not_read_as_a_learning_failure(tmp_path, monkeypatch):
    """A test run stopped by SIGTERM checkpoints and ends early: its curve would simply
    miss the bar, so train_to_bar says it was pre-empted instead."""
    real_train = learning.train

    def terminated_at_first_evaluation(config):
        def terminate(env_steps, metrics):
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's handler takes it
            return False

        return real_train(config, on_evaluation=terminate)

    monkeypatch.setattr(learning, "train", terminated_at_first_evaluation)
    with pytest.raises(RuntimeError, match="dqn_cartpole was pre-empted"):
        train_to_bar("dqn_cartpole", tmp_path / "run", 475, OVERRIDES)
