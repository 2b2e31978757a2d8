"""Off-policy resume is exact, replay buffer included: a dqn_cartpole run stopped after its
checkpoint at iteration N and resumed to 2N logs the same metrics (losses, returns, episode
counts) and ends with the same networks and replay buffer as an uninterrupted run."""

from __future__ import annotations

import subprocess

import pytest

from cadence.testing.resume import (
    assert_equal_nests,
    check_exact_resume,
    cli_train_command,
    comparable_metrics,
    final_state,
    signal_after_checkpoint,
)
from cadence.trainer.checkpoint import latest_iteration
from cadence.trainer.metrics import read_metrics

N = 6  # iterations before the stop; the budget is 2N iterations of 2 envs x 16 steps

OVERRIDES = [
    "env.num_envs=2",
    "trainer.unroll_length=16",
    f"trainer.num_env_steps={2 * N * 32}",
    f"trainer.checkpoint_interval={N}",
    "trainer.eval_interval=4",
    "trainer.num_eval_episodes=2",
    "trainer.progress_bar=off",
    "network.hidden_sizes=[32]",
    "algorithm.n_step=2",
    "algorithm.target_update_period=3",  # not a multiple of the updates per iteration
    "algorithm.exploration_fraction=0.5",
    "algorithm.off_policy.mini_batch_length=3",
    "algorithm.off_policy.initial_collect_steps=64",
    "algorithm.off_policy.replay_buffer_length=100",  # the rings wrap before 2N
    "algorithm.off_policy.mini_batch_size=16",
    "algorithm.off_policy.num_updates_per_train_iter=4",
    "seed=3",
]


@pytest.mark.parametrize("prioritized", [False, True])
def test_stopped_at_n_and_resumed_to_2n_matches_an_uninterrupted_run(tmp_path, prioritized):
    overrides = [*OVERRIDES, f"algorithm.off_policy.prioritized_replay={str(prioritized).lower()}"]
    run = check_exact_resume("dqn_cartpole", overrides, tmp_path, stop_after=N)
    records, state = run.records, run.state
    assert [r["iteration"] for r in records] == list(range(1, 2 * N + 1))
    assert any(r.get("loss/td") is not None for r in records)
    assert any(r.get("eval/episode_return") is not None for r in records[N:])
    assert records[-1]["rollout/num_episodes"] > 0
    assert state["counters"]["env_steps"] == 2 * N * 32
    assert int(state["scheme"]["replay_buffer"]["storage"]["num_added"][0]) == 2 * N * 16


def _command(root, budget: int) -> list[str]:
    overrides = [o for o in OVERRIDES if not o.startswith("trainer.num_env_steps")]
    return cli_train_command("dqn_cartpole", root, [*overrides, f"trainer.num_env_steps={budget}"])


@pytest.mark.slow  # three processes: about a minute on a loaded 2-core machine
def test_a_process_killed_with_sigkill_after_a_checkpoint_resumes_exactly(tmp_path):
    # A longer budget, so the kill lands well before the end of the run.
    budget = 8 * N * 32
    uninterrupted, root = tmp_path / "uninterrupted", tmp_path / "killed"
    subprocess.run(_command(uninterrupted, budget), check=True, capture_output=True, timeout=600)
    signal_after_checkpoint(_command(root, budget), root, after_iteration=N, timeout_s=300)
    assert not (root / "COMPLETE").exists(), "the run finished before it could be killed"
    killed_at = latest_iteration(root / "checkpoints")
    assert N <= killed_at < 8 * N
    subprocess.run(_command(root, budget), check=True, capture_output=True, timeout=600)
    assert comparable_metrics(read_metrics(root)) == comparable_metrics(read_metrics(uninterrupted))
    assert_equal_nests(final_state(root)["scheme"], final_state(uninterrupted)["scheme"])
