"""Atari games (the optional `atari` extra, which the tests install; skipped without it):
ALE ids work as they are, in this process and in worker processes; ppo_atari trains,
plays a video of the game and exports its policy; dqn_atari replays single frames as stacks."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from cadence.config import load_config
from cadence.envs import ids
from cadence.envs.errors import EnvBuildError, UnknownEnvironmentError
from cadence.envs.make import check_env_id, make_env
from cadence.envs.wrapper_config import gym_wrappers
from cadence.export import export_run
from cadence.trainer.metrics import read_metrics
from cadence.trainer.play import play
from cadence.trainer.run import train

pytest.importorskip("ale_py", reason="the atari extra is not installed")
pytest.importorskip("cv2", reason="the atari extra is not installed")

PONG = "ALE/Pong-v5"


def test_an_ale_id_needs_no_import_of_ale_py():
    # Gymnasium 1.x registers the ALE ids only once ale_py is imported; cadence imports it.
    code = (
        "import sys\n"
        "from cadence.envs.make import check_env_id\n"
        "assert 'ale_py' not in sys.modules\n"
        f"check_env_id({PONG!r})\n"
        "assert 'ale_py' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)


def test_a_missing_namespace_package_is_named_with_its_install(monkeypatch):
    packages = {"Fake": ("cadence_no_such_package", "pip install cadence-fake-envs")}
    monkeypatch.setattr(ids, "_NAMESPACE_PACKAGES", packages)
    with pytest.raises(UnknownEnvironmentError, match="pip install cadence-fake-envs"):
        check_env_id("Fake/Game-v0")


def test_parallel_workers_build_ale_envs_with_the_standard_frames():
    wrappers = gym_wrappers(
        [{"name": "AtariPreprocessing"}, {"name": "FrameStackObservation", "stack_size": 4}]
    )
    env = make_env(PONG, 2, "parallel", seed=0, gym_wrappers=wrappers, env_kwargs={"frameskip": 1})
    try:
        assert env.observation_spec.shape == (4, 84, 84)
        assert env.observation_spec.dtype == torch.uint8
        time_step = env.step(torch.zeros(2, dtype=torch.int64))
        assert time_step.observation.shape == (2, 4, 84, 84)
    finally:
        env.close()


def test_an_ale_state_restores_the_game_into_new_workers():
    """An ALE env pickles as its constructor's arguments; its emulator must come back too.

    Through workers, as on resuming a run: with sticky actions (v5's default), the frames
    after the restore match only if the emulator's RNG came back with it.
    """
    wrappers = gym_wrappers(
        [{"name": "AtariPreprocessing"}, {"name": "FrameStackObservation", "stack_size": 4}]
    )

    def make(seed):
        return make_env(
            PONG, 1, "parallel", seed=seed, gym_wrappers=wrappers, env_kwargs={"frameskip": 1}
        )

    actions = torch.randint(0, 6, (180, 1), generator=torch.Generator().manual_seed(0))
    env = make(seed=0)
    try:
        for action in actions[:30]:
            env.step(action)
        state = env.get_state()
        expected = [env.step(action).observation for action in actions[30:]]
    finally:
        env.close()
    restored = make(seed=1)
    try:
        restored.set_state(state)
        got = [restored.step(action).observation for action in actions[30:]]
    finally:
        restored.close()
    assert not torch.equal(expected[-1], expected[0])  # the game moved
    for want, observation in zip(expected, got, strict=True):
        assert torch.equal(observation, want)


def test_ppo_atari_trains_plays_a_video_of_the_game_and_exports(tmp_path):
    pytest.importorskip("imageio")
    run = tmp_path / "run"
    config = load_config("ppo_atari", _short_run(run, 64, "algorithm.mini_batch_size=16"))
    assert tuple(config.data_transformers.names) == ("reward_clipping",)
    train(config)
    records = read_metrics(run)
    assert records[-1]["env_steps"] == 64
    assert records[-1]["train/num_updates"] == 4 * 2  # 4 passes of 32 / 16 steps

    video = tmp_path / "pong.mp4"
    result = play(config, run, episodes=1, video_path=video)
    import imageio.v3 as iio

    frame = iio.imread(video, index=0)
    assert frame.shape == (210, 160, 3)  # the game's own frame, not the agent's 84x84
    assert result.lengths == [50]

    exported = export_run(config, run, "torchscript")
    assert exported.path.exists()


def test_dqn_atari_stores_single_frames_learns_from_their_stacks_plays_and_exports(tmp_path):
    run = tmp_path / "run"
    off_policy = [
        "algorithm.off_policy.initial_collect_steps=32",
        "algorithm.off_policy.mini_batch_size=8",
        "algorithm.off_policy.num_updates_per_train_iter=2",
    ]
    config = load_config("dqn_atari", _short_run(run, 96, *off_policy))
    train(config)
    records = read_metrics(run)
    assert records[-1]["env_steps"] == 96
    assert [r["train/num_updates"] for r in records if "train/num_updates" in r] == [2, 2, 2]
    # The checkpointed buffer holds each 84x84 frame once.
    chunk_file = next(run.glob("checkpoints/*/data/env00000-chunk*.pt"))
    chunk = torch.load(chunk_file, weights_only=True)
    assert chunk["time_step/observation"].shape[1:] == (84, 84)
    assert chunk["time_step/observation"].dtype == torch.uint8
    assert math.isfinite(records[-1]["train/q_value"])

    assert play(config, run, episodes=1).lengths == [50]
    # The policy acts on the frame and the 3 before it, which the exported file carries.
    sidecar = json.loads(export_run(config, run, "torchscript").sidecar.read_text())
    shapes = {entry["name"]: entry["shape"] for entry in sidecar["inputs"]}
    assert shapes == {
        "observation": ["batch", 84, 84],
        "is_first": ["batch"],
        "state/transformer/0": ["batch", 3, 84, 84],
    }


def _short_run(run, env_steps: int, *overrides: str) -> list[str]:
    """Overrides for ``env_steps`` steps of 2 envs x 16, evaluated for 50 steps at the end."""
    return [
        f"root_dir={run}",
        "trainer.progress_bar=off",
        "env.num_envs=2",
        "trainer.unroll_length=16",
        f"trainer.num_env_steps={env_steps}",
        "trainer.eval_interval=0",
        "trainer.eval_max_episode_steps=50",
        *overrides,
    ]


def test_a_run_on_ales_vector_env_plays_in_it_and_says_it_cannot_film(tmp_path):
    # ALE's vector env has the frame preprocessing built in: its observations are not the
    # single env's, so play acts in the vector env training stepped. It renders no frames.
    run = tmp_path / "run"
    overrides = [
        f"root_dir={run}",
        "trainer.progress_bar=off",
        "env.backend=vector",
        "env.wrappers=[]",
        "~env.env_kwargs.frameskip",
        "+env.env_kwargs.reward_clipping=false",
        "env.num_envs=2",
        "trainer.unroll_length=16",
        "trainer.num_env_steps=32",
        "trainer.eval_interval=0",
        "algorithm.mini_batch_size=16",
        "trainer.eval_max_episode_steps=20",
    ]
    config = load_config("ppo_atari", overrides)
    train(config)
    assert play(config, run, episodes=1).lengths == [20]
    with pytest.raises(EnvBuildError, match="renders no frames"):
        play(config, run, episodes=1, video_path=tmp_path / "pong.mp4")
