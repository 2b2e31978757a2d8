"""Data transformers inside the trainer: their statistics restore exactly from a checkpoint,
a resumed run continues exactly (an off-policy one stacking frames from replay too), and a
goal environment's is_success reaches rollout/success_rate and eval/success_rate."""

import shutil
from pathlib import Path

import torch

from cadence.config import load_config
from cadence.envs.suites import BIT_FLIP_ID
from cadence.testing.resume import comparable_metrics
from cadence.trainer.metrics import read_metrics
from cadence.trainer.play import evaluate, load_policy, play
from cadence.trainer.run import build_trainer, train

SMALL = [
    "env.num_envs=2",
    "env.backend=serial",
    "trainer.unroll_length=16",
    "trainer.num_env_steps=256",  # 8 iterations
    "trainer.eval_interval=4",
    "trainer.num_eval_episodes=2",
    "trainer.checkpoint_interval=4",
    "trainer.progress_bar=off",
    "seed=3",
]
NORMALIZED = ["data_transformers.names=[observation_normalizer,reward_normalizer]"]


def _config(root: Path, *overrides: str):
    return load_config("ppo_cartpole", [f"root_dir={root}", *SMALL, *NORMALIZED, *overrides])


def test_normalizer_statistics_restore_exactly_from_the_checkpoint(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    trainer = build_trainer(_config(root), root)
    trainer.run()
    trained = trainer.collector.transformer.state_dict()
    assert int(trained["transformers.0.stats.observation.count"]) == 256 + 2, "every step once"
    assert "data_transformers" in trainer.checkpoints.load(trainer.checkpoints.latest())
    restored = build_trainer(_config(root), root)
    before = restored.collector.transformer.state_dict()
    assert not torch.equal(
        before["transformers.0.stats.observation.mean"],
        trained["transformers.0.stats.observation.mean"],
    )
    assert restored.restore()
    for key, value in restored.collector.transformer.state_dict().items():
        assert value.dtype == torch.float64 and torch.equal(value, trained[key]), key
    returns = restored.collector.state_dict()["transform_state"][1]
    assert torch.equal(returns, trainer.collector.state_dict()["transform_state"][1])
    trainer.collector.env.close()
    restored.collector.env.close()


def test_play_and_evaluate_apply_the_checkpointed_transformers_frozen(tmp_path):
    root = tmp_path / "run"
    config = _config(root)
    train(config)
    env = build_trainer(config, root).collector.env
    algorithm, transformer = load_policy(config, root, env)
    assert not transformer.training
    checkpoint = build_trainer(config, root)
    checkpoint.restore()
    for key, value in checkpoint.collector.transformer.state_dict().items():
        assert torch.equal(transformer.state_dict()[key], value), key
    assert evaluate(config, root, episodes=2)["episodes"] == 2.0
    assert len(play(config, root, episodes=1).returns) == 1
    env.close()
    checkpoint.collector.env.close()


def _resumed_from_iteration_4(uninterrupted: Path, resumed: Path, config) -> list[dict]:
    """The records of a copy of the finished run ``uninterrupted`` resumed from its
    checkpoint at iteration 4 (of 8) with ``config(resumed)``."""
    shutil.copytree(uninterrupted, resumed)
    (resumed / "COMPLETE").unlink()
    shutil.rmtree(resumed / "checkpoints" / "00000008")
    (resumed / "checkpoints" / "LATEST").write_text("00000004")
    train(config(resumed))
    return read_metrics(resumed)


def test_a_run_resumed_from_a_checkpoint_continues_exactly(tmp_path):
    uninterrupted = tmp_path / "uninterrupted"
    train(_config(uninterrupted))
    records = _resumed_from_iteration_4(uninterrupted, tmp_path / "resumed", _config)
    assert comparable_metrics(records) == comparable_metrics(read_metrics(uninterrupted))


def test_an_off_policy_run_stacking_frames_from_replay_resumes_exactly(tmp_path):
    # The collector's frame history (its transformer state) and the buffer's single frames,
    # which replayed stacks are read from, both come back from the checkpoint.
    def config(root):
        overrides = [
            f"root_dir={root}",
            *SMALL,
            "data_transformers.names=[replay_frame_stack]",
            "data_transformers.replay_frame_stack.num_frames=3",
            "algorithm.off_policy.initial_collect_steps=32",
            "algorithm.off_policy.num_updates_per_train_iter=4",
            "algorithm.off_policy.mini_batch_size=16",
            "trainer.num_threads=1",
        ]
        return load_config("dqn_cartpole", overrides)

    uninterrupted = tmp_path / "uninterrupted"
    uninterrupted.mkdir()
    trainer = build_trainer(config(uninterrupted), uninterrupted)
    trainer.run()
    history = trainer.collector.state_dict()["transform_state"][0][""]  # [envs, 2, 4]
    assert not torch.equal(history[:, 0], history[:, 1]), "a history of one repeated frame"
    restored = build_trainer(config(uninterrupted), uninterrupted)
    assert restored.restore()
    assert torch.equal(restored.collector.state_dict()["transform_state"][0][""], history)
    for run in (trainer, restored):
        run.collector.env.close()

    records = _resumed_from_iteration_4(uninterrupted, tmp_path / "resumed", config)
    assert any("loss/td" in record for record in records[4:])
    assert comparable_metrics(records) == comparable_metrics(read_metrics(uninterrupted))


def test_is_success_of_a_goal_env_reaches_the_success_rates(tmp_path):
    overrides = [
        f"root_dir={tmp_path / 'run'}",
        *SMALL,
        f"env.name={BIT_FLIP_ID}",
        "+env.env_kwargs.n_bits=2",
        "trainer.eval_interval=1",
        "trainer.num_eval_episodes=8",
    ]
    train(load_config("ppo_cartpole", overrides))
    records = read_metrics(tmp_path / "run")
    rollout = [
        r["rollout/success_rate"] for r in records if r.get("rollout/success_rate") is not None
    ]
    evaluation = [r["eval/success_rate"] for r in records if r.get("eval/success_rate") is not None]
    assert rollout and evaluation
    assert all(0.0 <= rate <= 1.0 for rate in rollout + evaluation)
    # Two bits are reached by chance within their two steps about half the time.
    assert max(rollout) > 0 and max(evaluation) > 0
    assert min(rollout) < 1
