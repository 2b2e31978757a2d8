"""ReplayFrameStack: stacks from the buffer at sample time without crossing episode starts, the
same stacks on the rollout path, channel-first merging, the stacked spec and its config name."""

import pytest
import torch

from cadence.config import ConfigError, load_config
from cadence.data.specs import BoundedTensorSpec, TensorSpec
from cadence.transforms import ReplayFrameStack

F, M, L = 0, 1, 2
# One env: episode A at times 0-3, episode B from time 4 (still running).
STEP_TYPES = [F, M, M, L, F, M, M, M]


def _frames(step_types, make_steps):
    """Observation t is the frame [t] (shape (1,)), so a stack reads as the times it holds."""
    times = torch.arange(len(step_types), dtype=torch.float32).view(-1, 1, 1)
    return make_steps([[s] for s in step_types], observation=times)


def test_replayed_stacks_never_reach_across_an_episode_start(make_steps, make_buffer, window):
    buffer = make_buffer(_frames(STEP_TYPES, make_steps))
    stacker = ReplayFrameStack(TensorSpec((1,)), num_frames=3, replay_buffer=buffer)
    sample = window(buffer, [0, 0, 0], [[0, 1, 2], [3, 4, 5], [5, 6, 7]])
    stacks = stacker.transform_sample(sample).time_step.observation
    assert stacks.tolist() == [
        [[0, 0, 0], [0, 0, 1], [0, 1, 2]],
        [[1, 2, 3], [4, 4, 4], [4, 4, 5]],
        [[4, 4, 5], [4, 5, 6], [5, 6, 7]],
    ]
    assert buffer.gather_all()["time_step"]["observation"].shape == (1, 8, 1), (
        "single frames stored"
    )


def test_the_rollout_path_builds_the_same_stacks_as_replay(make_steps, make_buffer, window):
    steps = _frames(STEP_TYPES, make_steps)
    buffer = make_buffer(steps)
    stacker = ReplayFrameStack(TensorSpec((1,)), num_frames=3, replay_buffer=buffer)
    state = stacker.initial_state(1)
    rollout = []
    for t in range(len(STEP_TYPES)):
        step, state = stacker.transform_time_step(steps[t], state)
        rollout.append(step.observation[0])
    replayed = stacker.transform_sample(
        window(buffer, [0], [list(range(8))])
    ).time_step.observation[0]
    assert torch.equal(torch.stack(rollout), replayed)


def test_an_overwritten_episode_start_repeats_the_oldest_stored_frame(
    make_steps, make_buffer, window
):
    buffer = make_buffer(_frames([F, M, M, M, M, M], make_steps), capacity=4)  # times 2-5 kept
    stacker = ReplayFrameStack(TensorSpec((1,)), num_frames=3, replay_buffer=buffer)
    stacks = stacker.transform_sample(window(buffer, [0], [[2, 3, 4]])).time_step.observation
    assert stacks.tolist() == [[[2, 2, 2], [2, 2, 3], [2, 3, 4]]]


def test_images_stack_along_channels_oldest_first_and_the_spec_follows(make_time_step):
    spec = BoundedTensorSpec((2, 3, 3), torch.uint8, 0, 255)
    stacker = ReplayFrameStack(spec, num_frames=2)
    out = stacker.transformed_observation_spec(spec)
    assert out.shape == (4, 3, 3) and out.dtype == torch.uint8
    first = torch.full((1, 2, 3, 3), 1, dtype=torch.uint8)
    second = torch.full((1, 2, 3, 3), 2, dtype=torch.uint8)
    _, state = stacker.transform_time_step(make_time_step([F], observation=first), ())
    step, _ = stacker.transform_time_step(make_time_step([M], observation=second), state)
    assert step.observation[0, :, 0, 0].tolist() == [1, 1, 2, 2]
    assert out.contains(step.observation)


def test_grayscale_frames_stack_on_a_new_channel_axis_in_rollout_and_replay(
    make_steps, make_buffer, window
):
    # AtariPreprocessing's (84, 84) frames: the stack is (num_frames, H, W), as Gymnasium's
    # FrameStackObservation makes it, so that a CNN reads the frames as channels.
    spec = BoundedTensorSpec((2, 3), torch.uint8, 0, 255)
    frames = torch.arange(4, dtype=torch.uint8).view(4, 1, 1, 1).expand(4, 1, 2, 3)
    steps = make_steps([[F], [M], [M], [M]], observation=frames)
    buffer = make_buffer(steps)
    stacker = ReplayFrameStack(spec, num_frames=3, replay_buffer=buffer)
    out = stacker.transformed_observation_spec(spec)
    assert out.shape == (3, 2, 3) and out.dtype == torch.uint8
    state = stacker.initial_state(1)
    rollout = []
    for step in steps:
        step, state = stacker.transform_time_step(step, state)
        assert out.contains(step.observation[0])
        rollout.append(step.observation[0])
    replayed = stacker.transform_sample(window(buffer, [0], [[0, 1, 2, 3]])).time_step.observation
    assert replayed.shape == (1, 4, 3, 2, 3)
    assert replayed[0, :, :, 0, 0].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3]]
    assert torch.equal(torch.stack(rollout), replayed[0])


def test_a_first_step_restarts_the_history_of_its_row_only(make_time_step):
    stacker = ReplayFrameStack(TensorSpec(()), num_frames=3)
    state = ()
    for types, frame in [([F, F], [1.0, 1.0]), ([M, M], [2.0, 2.0]), ([F, M], [7.0, 3.0])]:
        step, state = stacker.transform_time_step(
            make_time_step(types, observation=torch.tensor(frame)), state
        )
    assert step.observation.tolist() == [[7.0, 7.0, 7.0], [1.0, 2.0, 3.0]]
    assert stacker.transformed_observation_spec(TensorSpec(())).shape == (3,)


def test_replay_without_a_buffer_says_what_is_missing(make_steps, make_buffer, window):
    buffer = make_buffer(_frames([F, M], make_steps))
    with pytest.raises(RuntimeError, match="built without one"):
        ReplayFrameStack(TensorSpec((1,)), num_frames=2).transform_sample(
            window(buffer, [0], [[0, 1]])
        )


@pytest.mark.parametrize(
    "override",
    ["data_transformers.names=[frame_stacker]", "data_transformers.frame_stacker.num_frames=2"],
)
def test_a_config_with_the_old_name_is_refused_naming_the_new_one(override):
    with pytest.raises(ConfigError, match="replay_frame_stack"):
        load_config("dqn_cartpole", [override])
    config = load_config("dqn_cartpole", [override.replace("frame_stacker", "replay_frame_stack")])
    assert config.data_transformers.replay_frame_stack.num_frames in (2, 4)
