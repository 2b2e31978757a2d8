"""``compile: auto`` reproduces a seed from the second run on a machine: the first run to
choose records its choices, and later runs take them from their first call."""

from __future__ import annotations

import json
import logging

import pytest

from cadence.accel import update_compiler
from cadence.testing.resume import (
    assert_equal_nests,
    comparable_metrics,
    final_state,
    train_named,
)
from cadence.trainer.metrics import read_metrics

OVERRIDES = [
    "algorithm.compile=auto",
    "env.num_envs=4",
    "trainer.unroll_length=16",
    # 12 iterations: the unroll's 2 x 4 measured unrolls, and the update's 2 x 6 calls
    "trainer.num_env_steps=768",
    "algorithm.mini_batch_size=32",
    "network.hidden_sizes=[16,16]",
    "trainer.eval_interval=6",
    "trainer.num_eval_episodes=1",
    "trainer.progress_bar=off",
    "seed=5",
]


@pytest.mark.compile
@pytest.mark.slow  # three short runs, each loading or compiling its graphs
def test_runs_after_the_first_take_its_choices_and_give_the_same_numbers(tmp_path, caplog):
    train_named("ppo_cartpole", tmp_path / "first", OVERRIDES)
    choices = json.loads(update_compiler.AUTO_RECORD.read_text())
    assert len(choices) >= 2 and set(choices.values()) <= {"eager", "compiled"}
    first = final_state(tmp_path / "first")
    assert first["algorithm"]["compile/choices"]  # the first run measured and chose
    caplog.clear()
    with caplog.at_level(logging.INFO):
        train_named("ppo_cartpole", tmp_path / "second", OVERRIDES)
    assert caplog.text.count("as first measured on this machine") == len(choices)
    assert " ms per call" not in caplog.text and "ms, compiled" not in caplog.text  # no timing
    train_named("ppo_cartpole", tmp_path / "third", OVERRIDES)
    assert json.loads(update_compiler.AUTO_RECORD.read_text()) == choices
    second, third = (read_metrics(tmp_path / name) for name in ("second", "third"))
    assert comparable_metrics(second) == comparable_metrics(third)
    states = [final_state(tmp_path / name) for name in ("second", "third")]
    assert_equal_nests(states[0]["algorithm"], states[1]["algorithm"], "algorithm")
