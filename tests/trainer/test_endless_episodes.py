"""An env whose episodes never end (no time limit, a policy that never reaches the goal)
is evaluated, played and evaluated from the CLI within `trainer.eval_max_episode_steps`
steps per episode, with a warning that says how to bound it, instead of forever."""

from __future__ import annotations

import logging

import pytest

from cadence.config import load_config
from cadence.trainer.metrics import read_metrics
from cadence.trainer.play import evaluate, play
from cadence.trainer.run import train

CAP = 25
OVERRIDES = [
    "env.name=endless_env:Endless-v0",  # tests/trainer/endless_env.py
    "env.backend=serial",
    "env.num_envs=2",
    "trainer.unroll_length=8",
    "trainer.num_env_steps=32",
    "trainer.eval_interval=1",
    "trainer.num_eval_episodes=3",
    f"trainer.eval_max_episode_steps={CAP}",
    "trainer.progress_bar=off",
    "algorithm.mini_batch_size=8",
]
WARNING = f"3 of 3 evaluation episodes did not end within {CAP} steps"


class _Messages(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def endless_run(tmp_path_factory):
    """A trained run of `Endless` and the warnings its training logged."""
    root = tmp_path_factory.mktemp("endless") / "run"
    config = load_config("ppo_cartpole", OVERRIDES, root_dir=root)
    handler = _Messages()
    logging.getLogger("cadence.trainer.evaluation").addHandler(handler)
    try:
        train(config)
    finally:
        logging.getLogger("cadence.trainer.evaluation").removeHandler(handler)
    return config, root, handler.messages


@pytest.mark.timeout(180)
def test_a_run_evaluates_episodes_that_never_end_up_to_the_cap(endless_run):
    _, root, messages = endless_run
    evaluations = [r for r in read_metrics(root) if "eval/episode_return" in r]
    assert len(evaluations) == 2  # iterations 1 and 2
    for record in evaluations:
        assert record["eval/episode_length"] == CAP
        assert record["eval/episode_return"] == CAP  # 1 per step, up to the cut
        assert record["eval/episodes_cut"] == 1.0
    assert sum(WARNING in message for message in messages) == 2
    assert all("env.max_episode_steps" in message for message in messages)


@pytest.mark.timeout(180)
def test_play_and_eval_cut_episodes_that_never_end(endless_run, caplog):
    config, root, _ = endless_run
    with caplog.at_level(logging.WARNING, logger="cadence.trainer.evaluation"):
        result = play(config, root, episodes=2)
        stats = evaluate(config, root, episodes=3)
    assert result.lengths == [CAP, CAP]
    assert result.returns == [CAP, CAP]
    assert stats["mean_length"] == CAP and stats["mean_return"] == CAP
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"2 of 2 evaluation episodes did not end within {CAP}" in m for m in messages)
    assert any(WARNING in m for m in messages)


def test_episodes_that_end_are_not_cut(tmp_path, caplog):
    """CartPole's episodes end: nothing is cut, and nothing is said."""
    overrides = [
        "env.num_envs=2",
        "trainer.unroll_length=8",
        "trainer.num_env_steps=32",
        "trainer.eval_interval=1",
        "trainer.num_eval_episodes=3",
        "trainer.progress_bar=off",
        "algorithm.mini_batch_size=8",
    ]
    config = load_config("ppo_cartpole", overrides, root_dir=tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="cadence.trainer.evaluation"):
        train(config)
    evaluations = [r for r in read_metrics(tmp_path / "run") if "eval/episode_return" in r]
    assert len(evaluations) == 2
    assert all(r["eval/episodes_cut"] == 0.0 for r in evaluations)
    assert not [r for r in caplog.records if r.name == "cadence.trainer.evaluation"]
