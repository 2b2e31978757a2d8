"""Off-policy resume is exact for SAC, replay buffer included: a sac_pendulum run stopped
after its checkpoint at iteration N and resumed to 2N logs the same metrics and ends with
the same networks, optimizers, temperature and replay buffer as an uninterrupted run."""

from __future__ import annotations

import pytest

from cadence.testing.resume import check_exact_resume

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


def _assert_resumes_exactly(tmp_path, extra: list[str]) -> None:
    run = check_exact_resume("sac_pendulum", [*OVERRIDES, *extra], tmp_path, stop_after=N)
    records, state = run.records, run.state
    assert sorted({r["iteration"] for r in records}) == list(range(1, 2 * N + 1))
    trained = [r for r in records[N:] if r.get("loss/critic") is not None]
    assert trained, "the second half must train (initial collection ends at iteration 2)"
    assert any(r.get("eval/episode_return") is not None for r in records[N:])
    assert int(state["scheme"]["replay_buffer"]["storage"]["num_added"][0]) == 2 * N * 16
    assert "optim/alpha" in state["algorithm"]
    assert "target_critic.mlp.0.weight" in state["algorithm"]


def test_sac_stopped_at_n_and_resumed_to_2n_matches_an_uninterrupted_run(tmp_path):
    _assert_resumes_exactly(tmp_path, [])


@pytest.mark.compile
@pytest.mark.slow  # compiling the update takes a minute or two on a loaded 2-core machine
def test_compiled_sac_resumes_exactly_too(tmp_path):
    _assert_resumes_exactly(tmp_path, ["algorithm.compile=default"])
