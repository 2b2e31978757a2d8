"""A recurrent PPO or A2C run resumes exactly: the checkpoint holds the recurrent state the
collector carries into the next unroll, so a run stopped after iteration N and resumed logs
the same metrics and ends with the same networks and optimizers as an uninterrupted one."""

from __future__ import annotations

import pytest
import torch

from cadence.testing.resume import check_exact_resume

N = 2  # iterations before the stop; the budget is 2N iterations of 2 envs x 16 steps

OVERRIDES = [
    "env.num_envs=2",
    "trainer.unroll_length=16",
    f"trainer.num_env_steps={2 * N * 32}",
    f"trainer.checkpoint_interval={N}",
    "trainer.eval_interval=1",
    "trainer.num_eval_episodes=2",
    "trainer.progress_bar=off",
    "seed=5",
]


@pytest.mark.parametrize(
    ("config", "overrides", "cores"),
    [
        (
            "ppo_cartpole_masked_gru",
            ["algorithm.mini_batch_size=1", "algorithm.num_updates_per_train_iter=2"],
            {"core": {"h"}},  # one GRU shared by actor and critic
        ),
        (
            "a2c_cartpole",
            ["network.recurrent=lstm", "network.share_encoder=false"],
            {"actor": {"h", "c"}, "critic": {"h", "c"}},
        ),
    ],
)
def test_a_recurrent_run_stopped_and_resumed_matches_an_uninterrupted_one(
    tmp_path, config, overrides, cores
):
    run = check_exact_resume(config, [*OVERRIDES, *overrides], tmp_path, stop_after=N)
    assert [r["iteration"] for r in run.records] == list(range(1, 2 * N + 1))
    assert all("eval/episode_return" in r for r in run.records)
    # The carried state is in the checkpoint, and it is not the initial state: the
    # episodes in progress continue from it after a resume.
    state = run.state["collector"]["state"]
    assert {core: set(s) for core, s in state.items()} == cores
    assert all(value.shape == (2, 64) for s in state.values() for value in s.values())
    assert any(value.abs().sum() > 0 for s in state.values() for value in s.values())
    for core, core_state in state.items():
        for key, value in core_state.items():
            assert torch.equal(value, run.reference_state["collector"]["state"][core][key])
