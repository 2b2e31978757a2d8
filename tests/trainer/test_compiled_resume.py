"""A compiled run (``algorithm.compile``) resumes exactly, and its checkpoints load into an
eager run: the compiled update keeps eager's state-dict keys and optimizer state."""

from __future__ import annotations

import pytest

from cadence.testing.resume import TINY_DREAMER_PENDULUM, check_exact_resume

COMMON = [
    "trainer.checkpoint_interval=3",
    "trainer.eval_interval=3",
    "trainer.num_eval_episodes=2",
    "trainer.summary_interval=1",
    "trainer.progress_bar=off",
    "network.hidden_sizes=[32,32]",
    "seed=3",
]


@pytest.mark.compile
@pytest.mark.slow  # compiling takes tens of seconds on a cold cache
@pytest.mark.parametrize(
    ("config", "overrides"),
    [
        (
            "ppo_cartpole",
            [
                "env.backend=tensor",
                "env.num_envs=4",
                "trainer.unroll_length=16",
                "trainer.num_env_steps=384",
            ],
        ),
        (
            "td3_pendulum",
            [
                "env.num_envs=2",
                "trainer.unroll_length=16",
                "trainer.num_env_steps=192",
                "algorithm.off_policy.initial_collect_steps=64",
                "algorithm.off_policy.mini_batch_size=16",
                "algorithm.off_policy.num_updates_per_train_iter=3",
            ],
        ),
        (  # the world-model and policy graphs, and the RSSM latent the collector carries
            "dreamer_pendulum",
            [*TINY_DREAMER_PENDULUM, "trainer.num_env_steps=600"],
        ),
    ],
)
def test_a_compiled_run_stopped_and_resumed_matches_an_uninterrupted_one(
    tmp_path, config, overrides
):
    run = check_exact_resume(
        config, [*COMMON, *overrides, "algorithm.compile=default"], tmp_path, stop_after=3
    )
    assert any(r.get("perf/compile_s", 0) > 0 for r in run.records)
