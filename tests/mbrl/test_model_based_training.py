"""Model-based runs go through the trainer like any off-policy run: they train, log the world
model's terms, checkpoint the recurrent latent and resume exactly after SIGKILL."""

from __future__ import annotations

import signal
import subprocess

import imageio.v2 as imageio
import pytest
import torch

from cadence.cli import main as cli_main
from cadence.latent_probe import probe_noisy_pendulum, probe_run
from cadence.testing.resume import (
    TINY_DREAMER_PENDULUM,
    assert_equal_nests,
    cli_train_command,
    comparable_metrics,
    final_state,
    signal_after_checkpoint,
    train_named,
)
from cadence.trainer.metrics import read_metrics

# A few seconds of dreamer_pendulum: 8 iterations of 50 agent steps (100 env steps with
# action repeat 2), training on 4 sequences of 10 steps from iteration 3 on.
TINY = [
    *TINY_DREAMER_PENDULUM,
    "trainer.num_env_steps=800",
    "trainer.checkpoint_interval=2",
    "trainer.eval_interval=4",
    "trainer.num_eval_episodes=1",
    "trainer.progress_bar=off",
    "seed=3",
]


def test_a_dreamer_run_killed_with_sigkill_resumes_exactly(tmp_path):
    uninterrupted, killed = tmp_path / "uninterrupted", tmp_path / "killed"
    subprocess.run(
        cli_train_command("dreamer_pendulum", uninterrupted, TINY),
        check=True,
        capture_output=True,
        timeout=600,
    )
    command = cli_train_command("dreamer_pendulum", killed, TINY)
    process = signal_after_checkpoint(command, killed, signal.SIGKILL, 4, timeout_s=300)
    assert process.returncode == -signal.SIGKILL
    assert not (killed / "COMPLETE").exists(), "the run finished before it could be killed"
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    records = read_metrics(killed)
    assert comparable_metrics(records) == comparable_metrics(read_metrics(uninterrupted))
    keys = set().union(*records)
    for term in (
        "loss/observation_nll",
        "loss/reward_nll",
        "loss/kl_x",
        "loss/actor",
        "loss/value",
    ):
        assert term in keys, term
    # The collector's recurrent latent (the RSSM posterior) is part of the checkpoint.
    state, reference = final_state(killed), final_state(uninterrupted)
    latent = state["collector"]["state"]
    assert set(latent) == {"x_belief", "x_state"}
    assert latent["x_belief"].abs().sum() > 0
    assert_equal_nests(state["algorithm"], reference["algorithm"], "algorithm")


@pytest.mark.parametrize("name", ["denoised_mdp", "sac_latent"])
def test_the_other_model_based_algorithms_train(tmp_path, name):
    overrides = [*TINY, f"algorithm={name}", "trainer.num_env_steps=600"]
    if name == "sac_latent":
        overrides = [o for o in overrides if "actor_critic" not in o]
    assert train_named("dreamer_pendulum", tmp_path, overrides) == "complete"
    keys = set().union(*read_metrics(tmp_path))
    assert {"loss/kl_y", "loss/observation_nll", "loss/actor"} <= keys
    latent = final_state(tmp_path)["collector"]["state"]
    assert set(latent) == {"x_belief", "x_state", "y_belief", "y_state"}
    # eval and play act from the filtered latent of the checkpoint's model.
    assert cli_main(["eval", str(tmp_path), "--episodes", "2"]) == 0
    video = tmp_path / "play.mp4"
    assert cli_main(["play", str(tmp_path), "--episodes", "1", "--video", str(video)]) == 0
    with imageio.get_reader(video, "ffmpeg") as reader:
        assert sum(1 for _ in reader) == 61  # the first frame and one per action


def test_a_pixel_run_trains_and_writes_reconstruction_videos_that_decode(tmp_path):
    import imageio.v2 as imageio

    overrides = [
        "trainer.num_env_steps=160",
        "trainer.unroll_length=20",
        "trainer.eval_interval=4",
        "trainer.checkpoint_interval=4",
        "trainer.num_eval_episodes=1",
        "trainer.progress_bar=off",
        "env.max_episode_steps=30",
        "algorithm.off_policy.initial_collect_steps=80",
        "algorithm.off_policy.mini_batch_size=2",
        "algorithm.off_policy.mini_batch_length=8",
        "algorithm.off_policy.num_updates_per_train_iter=1",
        "algorithm.world_model.x_belief_size=32",
        "algorithm.world_model.x_state_size=8",
        "algorithm.world_model.hidden_size=32",
        "algorithm.world_model.mlp_hidden_size=32",
        "algorithm.actor_critic.hidden_size=32",
        "algorithm.actor_critic.num_start_states=8",
        "algorithm.actor_critic.horizon=3",
    ]
    assert train_named("dreamer_pendulum_pixels", tmp_path, overrides) == "complete"
    videos = sorted((tmp_path / "videos").glob("video_model-*.mp4"))
    assert [v.name for v in videos] == ["video_model-160.mp4"]  # the evaluation at 160
    frames = imageio.mimread(videos[0])
    # 8 steps; 2 sequences stacked; observation | reconstruction | imagination side by side.
    assert len(frames) == 8
    assert frames[0].shape == (128, 192, 3)
    events = list((tmp_path / "tb").glob("events.*"))
    assert any(b"video/model" in e.read_bytes() for e in events)


def test_the_noisy_dmc_config_trains_a_few_iterations(tmp_path):
    pytest.importorskip("dm_control", reason="the dmc extra is not installed")
    overrides = [
        "trainer.num_env_steps=120",
        "trainer.unroll_length=20",
        "trainer.eval_interval=3",
        "trainer.checkpoint_interval=3",
        "trainer.num_eval_episodes=1",
        "trainer.progress_bar=off",
        "env.max_episode_steps=30",
        "algorithm.off_policy.initial_collect_steps=40",
        "algorithm.off_policy.mini_batch_size=2",
        "algorithm.off_policy.mini_batch_length=6",
        "algorithm.off_policy.num_updates_per_train_iter=1",
        "algorithm.world_model.x_belief_size=16",
        "algorithm.world_model.y_belief_size=16",
        "algorithm.world_model.hidden_size=16",
        "algorithm.world_model.mlp_hidden_size=16",
        "algorithm.actor_critic.hidden_size=16",
        "algorithm.actor_critic.num_start_states=4",
        "algorithm.actor_critic.horizon=2",
    ]
    assert train_named("denoised_mdp_cheetah_noisy", tmp_path, overrides) == "complete"
    frames = __import__("imageio.v2", fromlist=["mimread"]).mimread(
        next((tmp_path / "videos").glob("video_model-*.mp4"))
    )
    # observation | reconstruction | imagination | reconstruction from x alone
    assert frames[0].shape == (128, 256, 3)


def test_the_probe_reads_a_noisy_pendulum_run_at_any_of_its_checkpoints(tmp_path):
    overrides = [*TINY, "trainer.num_env_steps=600"]
    assert train_named("denoised_mdp_pendulum_noisy", tmp_path, overrides) == "complete"
    latest = probe_noisy_pendulum(tmp_path)
    assert set(latest) == {"cos", "sin", "velocity", "y_max", "z_max"}
    assert all(-float("inf") < value <= 1 for value in latest.values())
    assert probe_noisy_pendulum(tmp_path) == latest  # the same episodes, the same numbers
    early = probe_run(tmp_path, checkpoint="2")
    assert early.shape == (15,)  # the pendulum's 3 signals and 6 oscillators' (cos, sin)
    assert not torch.equal(early, probe_run(tmp_path))  # another checkpoint, another model
    with pytest.raises(ValueError, match="held_out"):
        probe_run(tmp_path, episodes=4, held_out=4)
