"""`ReplayBuffer`: raw unrolls in, `[N, L]` windows out, priorities, clear and state round trips.

(Named test_replay_buffer.py, not test_buffer.py: tests/ has no packages, so basenames must
be unique and cadence/envs/buffer.py may get a test_buffer.py of its own.)
"""

from __future__ import annotations

import pytest
import torch

from cadence.data.experience import Experience
from cadence.data.time_step import StepType, TimeStep
from cadence.replay.buffer import ReplayBuffer
from cadence.replay.prioritized import PrioritizedSampler


def _experience(start: int, steps: int = 3, num_envs: int = 2, info: object = ()) -> Experience:
    """An unroll whose observation at time t of env e is ``[t, e]``; it ends an episode at t=4."""
    times = torch.arange(start, start + steps + 1, dtype=torch.float32)
    env = torch.arange(num_envs, dtype=torch.float32)
    observation = torch.stack(torch.broadcast_tensors(times[:, None], env[None, :]), dim=-1)
    step_type = torch.full((steps + 1, num_envs), int(StepType.MID))
    step_type[times == 0] = StepType.FIRST
    step_type[times == 4] = StepType.LAST
    time_step = TimeStep(
        step_type=step_type,
        reward=times[:, None].expand(-1, num_envs).clone(),
        discount=(step_type != StepType.LAST).float(),
        observation=observation,
        prev_action=torch.zeros(steps + 1, num_envs, dtype=torch.int64),
        env_id=env.long().expand(steps + 1, -1).clone(),
        env_info={"speed": torch.ones(steps + 1, num_envs)},
    )
    action = (10 * times[:steps, None] + env).long()
    return Experience(time_step=time_step, action=action, info=info)


def test_an_unroll_is_stored_raw_without_its_bootstrap_step():
    buffer = ReplayBuffer(num_envs=2, capacity=8)
    raw = _experience(0)
    transformed = raw.time_step.replace(
        observation=raw.time_step.observation * 100, untransformed=raw.time_step
    )
    buffer.add_experience(Experience(transformed, raw.action, raw.info))
    assert buffer.num_steps == 6, "time step T starts the next unroll and is not stored"
    stored = buffer.gather_all()
    assert torch.equal(
        stored["time_step"]["observation"], raw.time_step.observation[:3].transpose(0, 1)
    )
    assert torch.equal(stored["action"], raw.action.T)
    assert stored["info"] == ()


def test_sampled_windows_come_back_as_time_steps_with_their_actions():
    buffer = ReplayBuffer(num_envs=2, capacity=8)
    buffer.add_experience(_experience(0, info={"log_prob": torch.zeros(3, 2)}))
    buffer.add_experience(_experience(3, info={"log_prob": torch.ones(3, 2)}))
    sample = buffer.sample(batch_size=32, length=2, generator=torch.Generator().manual_seed(0))
    time_step = sample.time_step
    assert time_step.observation.shape == (32, 2, 2) and sample.action.shape == (32, 2)
    times, envs = time_step.observation[..., 0], time_step.observation[..., 1]
    assert bool((times[:, 1] == times[:, 0] + 1).all()) and bool(
        (envs == sample.env_ids[:, None]).all()
    )
    assert torch.equal(sample.action, (10 * times + envs).long()), "each step keeps its own action"
    assert torch.equal(
        time_step.step_type[times == 4], torch.full_like(times[times == 4], 2).long()
    )
    assert torch.equal(sample.info["log_prob"], (times >= 3).float())
    assert torch.equal(sample.indices, sample.env_ids * 8 + sample.positions[:, 0])
    assert bool((sample.weights == 1).all())


def test_priorities_reach_a_prioritized_sampler_and_are_refused_by_a_uniform_one():
    buffer = ReplayBuffer(num_envs=2, capacity=8, sampler=PrioritizedSampler(alpha=1.0, beta=1.0))
    buffer.add_experience(_experience(0, steps=6))
    sample = buffer.sample(4, length=2, generator=torch.Generator().manual_seed(0))
    buffer.update_priorities(sample.indices, torch.full((4,), 3.0))
    assert buffer.sampler.state_dict()["max_priority"] == 3.0
    uniform = ReplayBuffer(num_envs=2, capacity=8)
    uniform.add_experience(_experience(0))
    with pytest.raises(TypeError, match="UniformSampler keeps no priorities"):
        uniform.update_priorities(sample.indices, torch.ones(4))


def test_iterate_minibatches_is_one_pass_over_every_window():
    buffer = ReplayBuffer(num_envs=2, capacity=8)
    buffer.add_experience(_experience(0, steps=6))
    batches = list(buffer.iterate_minibatches(4, 3, generator=torch.Generator().manual_seed(0)))
    # 6 stored steps per env: windows of 3 start at times 0..3 of both envs.
    assert [b.action.shape for b in batches] == [torch.Size([4, 3])] * 2
    observed = sorted(
        tuple(b) for batch in batches for b in batch.time_step.observation[:, 0].tolist()
    )
    assert observed == [(float(t), float(e)) for t in range(4) for e in range(2)]


def test_clear_empties_buffer_sampler_and_episode_index():
    buffer = ReplayBuffer(num_envs=2, capacity=8, sampler=PrioritizedSampler())
    buffer.add_experience(_experience(0))
    buffer.update_priorities(torch.tensor([0]), torch.tensor([9.0]))
    buffer.clear()
    assert buffer.num_steps == 0
    assert buffer.sampler.state_dict()["max_priority"] == 1.0
    with pytest.raises(ValueError, match="no window"):
        buffer.sample(1, length=1)
    buffer.add_experience(_experience(3))  # times 3, 4 (LAST), 5
    positions = torch.tensor([[0, 1, 2]])
    assert buffer.episode_index.episode_end(torch.tensor([0]), positions).tolist() == [[1, 1, -1]]


def test_state_dict_round_trip_resumes_sampling_and_indexing_exactly():
    def make() -> ReplayBuffer:
        return ReplayBuffer(num_envs=2, capacity=5, sampler=PrioritizedSampler(alpha=0.5))

    buffer = make()
    for start in (0, 3, 6):  # wraps: 9 steps per env in rings of 5
        buffer.add_experience(_experience(start))
    buffer.update_priorities(torch.tensor([1, 7]), torch.tensor([4.0, 0.5]))
    restored = make()
    restored.load_state_dict(buffer.state_dict())
    for b in (buffer, restored):
        b.add_experience(_experience(9))
    first = buffer.sample(16, 2, generator=torch.Generator().manual_seed(5))
    again = restored.sample(16, 2, generator=torch.Generator().manual_seed(5))
    assert torch.equal(first.time_step.observation, again.time_step.observation)
    assert torch.equal(first.weights, again.weights)
    envs, positions = torch.tensor([0, 1]), torch.tensor([[0, 1, 2, 3, 4]] * 2)
    index, rebuilt = buffer.episode_index, restored.episode_index
    assert torch.equal(index.episode_start(envs, positions), rebuilt.episode_start(envs, positions))
    assert torch.equal(index.episode_end(envs, positions), rebuilt.episode_end(envs, positions))


def test_rows_without_a_step_type_have_no_episode_index():
    buffer = ReplayBuffer(num_envs=1, capacity=4)
    buffer.add({"x": torch.zeros(1)})
    with pytest.raises(RuntimeError, match="time_step/step_type"):
        _ = buffer.episode_index


def test_a_sample_of_some_fields_holds_the_same_windows_as_a_full_one():
    buffer = ReplayBuffer(num_envs=2, capacity=5)
    buffer.add_experience(_experience(0, steps=4))
    full = buffer.sample(6, length=2, generator=torch.Generator().manual_seed(3))
    fields = ["time_step/observation", "action"]
    some = buffer.sample(6, length=2, generator=torch.Generator().manual_seed(3), fields=fields)
    assert set(some.steps) == {"time_step", "action"}
    assert set(some.steps["time_step"]) == {"observation"}
    assert torch.equal(some.steps["time_step"]["observation"], full.time_step.observation)
    assert torch.equal(some.action, full.action)
    assert torch.equal(some.indices, full.indices)
    # Drawing now and reading later gives the same windows.
    indices = buffer.sample_indices(6, 2, generator=torch.Generator().manual_seed(3))
    later = buffer.read(indices, fields)
    assert torch.equal(later.steps["time_step"]["observation"], full.time_step.observation)
