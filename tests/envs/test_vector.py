"""The ``vector`` back end: a Gymnasium vector env's batch as cadence time steps."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from countdown_vector_env import COUNTDOWN_ID, CountdownVectorEnv
from gymnasium.vector import AutoresetMode

from cadence.collect.batcher.gym_env import make_gym_env
from cadence.config import load_config
from cadence.data.time_step import StepType
from cadence.envs import make_env
from cadence.envs.config import EnvConfig
from cadence.envs.errors import EnvBuildError, EnvStateMismatchError
from cadence.envs.make import check_env
from cadence.envs.serial import SerialEnvironment
from cadence.envs.tensor.environment import TensorEnvironment
from cadence.envs.vector import VectorEnvironment
from cadence.testing import DictObservationEnv, check_environment
from cadence.testing.resume import check_exact_resume
from cadence.trainer.play import play

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


def test_a_users_vector_env_gives_time_steps_by_the_discount_table():
    with make_env(COUNTDOWN_ID, 3, seed=1) as env:  # "auto": the id has no single env
        assert isinstance(env, VectorEnvironment)
        assert env.observation_spec.dtype == torch.float32  # float64 observations, as specs say
        assert env.action_spec.nvec == 3  # Discrete(3, start=-1), counted from 0
        assert list(env.env_info_spec) == ["count"]
        first = env.reset()
        assert first.step_type.tolist() == [FIRST] * 3
        counts = first.observation[:, 0].clone()
        previous_last = torch.zeros(3, dtype=torch.bool)
        ends = 0
        for t in range(12):
            action = torch.tensor([2, 1, 0]).roll(t)  # gym actions 1, 0, -1 in turn
            time_step = env.step(action)
            assert env.vector_env.actions_taken[-1].tolist() == (action - 1).tolist()
            step_type = time_step.step_type
            assert torch.equal(step_type == FIRST, previous_last), f"step {t}: FIRST after LAST"
            first, last = step_type == FIRST, step_type == LAST
            assert torch.all(time_step.reward[first] == 0)
            assert torch.all(time_step.prev_action[first] == 0)
            assert torch.equal(time_step.prev_action[~first], action[~first])
            assert torch.equal(time_step.reward[~first], (action - 1)[~first].float())
            # The countdown only terminates: every LAST has discount 0, every other step 1.
            assert torch.equal(time_step.discount, (~last).float())
            counts = torch.where(first, time_step.observation[:, 0], counts - (action + 1))
            assert torch.equal(time_step.observation[:, 0], counts)
            assert time_step.env_info["count"][1] == 0  # odd envs do not report it
            assert torch.equal(time_step.env_info["count"][::2], counts[::2])
            ends += int(last.sum())
            previous_last = last
        assert ends >= 3


def test_a_time_limit_truncates_with_discount_one():
    with make_env(COUNTDOWN_ID, 2, "vector", seed=0, max_episode_steps=2) as env:
        env.reset()
        steps = [env.step(torch.zeros(2, dtype=torch.int64)) for _ in range(6)]  # 1 off a step
        assert [s.step_type.tolist() for s in steps] == [[MID] * 2, [LAST] * 2, [FIRST] * 2] * 2
        assert all(s.discount.tolist() == [1.0, 1.0] for s in steps)


def test_the_same_seed_gives_the_same_episodes_and_other_seeds_others():
    def observations(seed: int) -> list[torch.Tensor]:
        with make_env("CartPole-v1", 4, "vector", seed=seed) as env:
            generator = torch.Generator().manual_seed(0)
            steps = [env.reset()] + [
                env.step(env.action_spec.sample((4,), generator)) for _ in range(30)
            ]
            return [s.observation for s in steps]

    same = observations(3)
    assert all(torch.equal(a, b) for a, b in zip(same, observations(3), strict=True))
    assert not torch.equal(same[0], observations(4)[0])


def test_a_restored_state_continues_exactly():
    generator = torch.Generator().manual_seed(0)
    actions = [torch.randint(0, 2, (4,), generator=generator) for _ in range(80)]
    with make_env("CartPole-v1", 4, "vector", seed=0) as env:
        env.reset()
        for action in actions[:20]:
            env.step(action)
        state = env.get_state()
        expected = [env.step(action) for action in actions[20:]]
    with make_env("CartPole-v1", 4, "vector", seed=9) as restored:
        restored.reset()
        restored.set_state(state)
        for action, want in zip(actions[20:], expected, strict=True):
            got = restored.step(action)
            for field in ("step_type", "reward", "discount", "observation", "prev_action"):
                assert torch.equal(getattr(got, field), getattr(want, field)), field
        # A state saved by another back end is not this one's.
        with make_env("CartPole-v1", 4, "serial", seed=0) as serial:
            with pytest.raises(EnvStateMismatchError):
                restored.set_state(serial.get_state())
            with pytest.raises(EnvStateMismatchError):
                serial.set_state(state)


def test_auto_picks_a_vector_env_on_a_cpu_unless_another_back_end_fits_better():
    assert isinstance(make_env("CartPole-v1", 8, seed=0), VectorEnvironment)
    # cadence's tensor-native CartPole, which the collector unrolls in one compiled call
    assert isinstance(make_env("CartPole-v1", 64, seed=0), TensorEnvironment)
    assert isinstance(make_env("CartPole-v1", 8, "prefer_tensor", seed=0), TensorEnvironment)
    wrapped = make_env(
        "CartPole-v1", 2, seed=0, gym_wrappers=[gym.wrappers.RecordEpisodeStatistics]
    )
    assert isinstance(wrapped, SerialEnvironment)  # a vector env cannot apply the wrappers
    assert not isinstance(make_env("Pendulum-v1", 2, seed=0), VectorEnvironment)  # it has none
    # An id with a vector env alone is built as one wherever it runs.
    assert isinstance(make_env(COUNTDOWN_ID, 2, "prefer_tensor", seed=0), VectorEnvironment)


def test_what_a_vector_env_cannot_do_is_refused_saying_what_would_work():
    with pytest.raises(ValueError, match="not registered with a vector_entry_point.*'serial'"):
        make_env("Pendulum-v1", 2, "vector")
    with pytest.raises(ValueError, match="cannot apply Gymnasium wrappers"):
        make_env("CartPole-v1", 2, "vector", gym_wrappers=[gym.wrappers.RecordEpisodeStatistics])
    with pytest.raises(ValueError, match="cannot apply env.wrappers"):
        EnvConfig(name="CartPole-v1", backend="vector", action_repeat=2)
    same_step = functools.partial(CountdownVectorEnv, autoreset_mode=AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match="autoreset_mode.*NEXT_STEP"):
        make_env(same_step, 2, "vector")
    with pytest.raises(ValueError, match="is not a gymnasium.vector.VectorEnv"):
        make_env(lambda num_envs: gym.make("CartPole-v1"), 2, "vector")
    with pytest.raises(Exception, match="not registered with a vector_entry_point"):
        check_env("Pendulum-v1", "vector")


def test_a_vector_env_class_works_as_its_own_builder():
    with make_env(
        CountdownVectorEnv, 2, "vector", seed=0, env_kwargs={"max_episode_steps": 1}
    ) as env:
        env.reset()
        assert env.step(torch.zeros(2, dtype=torch.int64)).step_type.tolist() == [LAST] * 2
        assert env.vector_env.max_episode_steps == 1


def test_vector_time_steps_do_not_share_memory_with_later_ones():
    with make_env("CartPole-v1", 2, "vector", seed=0) as env:
        env.reset()
        action = torch.ones(2, dtype=torch.int64)
        kept = env.step(action)
        before = kept.observation.clone(), kept.prev_action.clone()
        action.zero_()  # the caller reuses its action tensor
        env.step(action)
        assert torch.equal(kept.observation, before[0])
        assert torch.equal(kept.prev_action, before[1])


def test_a_vector_only_id_is_checked_as_a_vector_env_and_refused_by_the_others():
    check_env(COUNTDOWN_ID)  # "auto": a single-env back end could not build it
    for backend in ("serial", "parallel"):
        with pytest.raises(EnvBuildError, match="vector env alone.*'vector' or 'auto'"):
            check_env(COUNTDOWN_ID, backend)
    with pytest.raises(ValueError, match="vector env alone"):
        make_env(COUNTDOWN_ID, 2, "thread")
    with pytest.raises(ValueError, match="vector env alone.*backend='vector'"):
        make_gym_env(seed=0, name=COUNTDOWN_ID)  # a Batcher's envs, one at a time


@pytest.mark.timeout(300)
def test_a_run_on_a_users_vector_env_resumes_exactly_and_plays(tmp_path):
    overrides = [
        f"env.name=countdown_vector_env:{COUNTDOWN_ID}",  # tests/envs/countdown_vector_env.py
        "env.backend=auto",
        "env.num_envs=4",
        "trainer.unroll_length=8",
        "trainer.num_env_steps=192",  # 6 iterations
        "trainer.checkpoint_interval=2",
        "trainer.eval_interval=3",
        "trainer.num_eval_episodes=2",
        "trainer.progress_bar=off",
        "algorithm.mini_batch_size=16",
    ]
    # Stopped after iteration 2 mid-episode: the vector env's state comes back from the
    # checkpoint, so the resumed run logs what the uninterrupted one does.
    run = check_exact_resume("ppo_cartpole", overrides, tmp_path, stop_after=2)
    assert any("env_info/count" in key for record in run.records for key in record)
    assert any("eval/episode_return" in record for record in run.records)
    config = load_config("ppo_cartpole", [*overrides, f"root_dir={tmp_path / 'resumed'}"])
    result = play(config, tmp_path / "resumed", episodes=2)
    assert len(result.lengths) == 2 and all(1 <= n <= 5 for n in result.lengths)


def test_a_vector_env_of_dict_observations_and_actions_keeps_the_contract():
    """Gymnasium's own ``SyncVectorEnv`` (which resets in the next step) over an env with
    ``Dict`` observations and actions, built by a callable of ``num_envs``."""

    def sync_dict_envs(num_envs: int) -> gym.vector.VectorEnv:
        return gym.vector.SyncVectorEnv([DictObservationEnv] * num_envs)

    report = check_environment(
        lambda seed: make_env(sync_dict_envs, 3, "vector", seed), seed=3, num_steps=210
    )
    assert report.episodes >= 3 and report.terminations > 0 and report.truncations > 0


def test_a_vector_env_renders_the_env_asked_for():
    def pendulums(num_envs: int, render_mode: str | None = None) -> gym.vector.VectorEnv:
        make = functools.partial(gym.make, "Pendulum-v1", render_mode=render_mode)
        return gym.vector.SyncVectorEnv([make] * num_envs)

    with make_env(pendulums, 2, "vector", env_kwargs={"render_mode": "rgb_array"}) as env:
        env.reset()
        frames = [env.render(i) for i in range(2)]
        assert all(frame.shape == (500, 500, 3) and frame.dtype == np.uint8 for frame in frames)
        assert not np.array_equal(frames[0], frames[1])  # two pendulums, two start angles
