"""train_to_bar and EvalCurve: what a learning test reads back from a run."""

from cadence.testing.learning import EvalCurve, train_to_bar


def test_eval_curve_finds_the_first_evaluation_at_the_bar():
    curve = EvalCurve(env_steps=[100, 200, 300], returns=[-500.0, -150.0, -180.0], budget=300)
    assert curve.best_return == -150.0
    assert curve.env_steps_to(-200) == 200
    assert curve.env_steps_to(-100) is None


def test_train_to_bar_reads_back_every_evaluation(tmp_path):
    overrides = [
        "seed=0",
        "env.num_envs=2",
        "trainer.unroll_length=16",
        "trainer.num_env_steps=128",
        "trainer.eval_interval=2",
        "trainer.num_eval_episodes=1",
    ]
    curve = train_to_bar("dqn_cartpole", tmp_path / "run", 475, overrides)
    assert curve.env_steps == [64, 128] and curve.budget == 128
    assert all(r >= 1 for r in curve.returns)  # a CartPole episode earns 1 per step
