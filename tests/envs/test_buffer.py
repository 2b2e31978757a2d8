"""`TimeStepBuffer`: rows written by envs, read out as a batched torch `TimeStep`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cadence.data.nest import flatten_with_paths
from cadence.data.specs import BoundedTensorSpec, CompositeSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.buffer import GATHER_INDEX_BYTES, RowGather, TimeStepBuffer


def _buffer(batch_size: int = 3) -> TimeStepBuffer:
    return TimeStepBuffer(
        TensorSpec((2,), torch.float32),
        BoundedTensorSpec((1,), minimum=-1.0, maximum=1.0),
        CompositeSpec({"x": TensorSpec((), torch.float32)}),
        batch_size,
    )


def _row(value: float, env_id: int) -> TimeStep:
    return TimeStep(
        step_type=int(StepType.MID),
        reward=value,
        discount=1.0,
        observation=np.full(2, value, np.float32),
        prev_action=np.full(1, -value, np.float32),
        env_id=env_id,
        env_info={"x": 10 * value},
    )


def test_read_and_read_prepared_deliver_the_same_batch():
    buffer = _buffer()
    buffer.write_rows(0, [_row(0.5 * i, i) for i in range(3)])
    read, prepared = buffer.read(), buffer.read_prepared(buffer.prepare())
    for field in ("step_type", "reward", "discount", "observation", "prev_action", "env_id"):
        assert getattr(prepared, field).equal(getattr(read, field)), field
    assert prepared.env_info["x"].equal(read.env_info["x"])
    assert prepared.observation.tolist() == [[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]]


def test_a_prepared_time_step_is_its_own_copy():
    buffer = _buffer()
    buffer.write_rows(0, [_row(1.0, i) for i in range(3)])
    first = buffer.read_prepared(buffer.prepare())
    buffer.write_rows(0, [_row(2.0, i) for i in range(3)])
    second = buffer.read_prepared(buffer.prepare())
    assert first.reward.tolist() == [1.0] * 3  # not overwritten by the next rows
    assert second.reward.tolist() == [2.0] * 3


def test_reads_across_slabs_keep_their_own_rows():
    buffer = _buffer()
    reads = []
    for value in range(3 * buffer._slab_slots + 1):  # into a fourth slab
        buffer.write_rows(0, [_row(float(value), i) for i in range(3)])
        reads.append(buffer.read())
    for value, read in enumerate(reads):
        assert read.reward.tolist() == [float(value)] * 3
        assert read.observation.tolist() == [[float(value)] * 2] * 3
        assert read.env_info["x"].tolist() == [10.0 * value] * 3
        assert read.env_id.tolist() == [0, 1, 2]
        assert read.observation.is_contiguous() and read.prev_action.is_contiguous()
    assert (
        reads[0].reward.untyped_storage().data_ptr()
        != reads[-1].reward.untyped_storage().data_ptr()
    )


def test_a_large_block_takes_a_slab_of_its_own():
    images = TensorSpec((64, 64, 64), torch.float32)  # 1 MiB per env
    buffer = TimeStepBuffer(images, TensorSpec((), torch.int64), CompositeSpec(), 2)
    assert buffer._slab_slots == 1
    first, second = buffer.read(), buffer.read()
    assert (
        first.observation.untyped_storage().data_ptr()
        != second.observation.untyped_storage().data_ptr()
    )


def test_a_whole_batch_is_written_column_by_column_in_the_fields_dtypes():
    buffer = _buffer()
    buffer.write_batch(
        np.array([0, 1, 2]),
        np.array([1.5, 2.5, 3.5]),  # float64: stored as float32
        np.ones(3),
        np.arange(6.0).reshape(3, 2),
        np.full((3, 1), 0.5),
        {"x": np.array([7.0, 8.0, 9.0])},
    )
    buffer.zero_actions(np.array([False, True, False]))
    read = buffer.read()
    assert read.step_type.tolist() == [0, 1, 2] and read.reward.dtype == torch.float32
    assert read.observation.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert read.prev_action.tolist() == [[0.5], [0.0], [0.5]]
    assert read.env_info["x"].tolist() == [7.0, 8.0, 9.0]
    buffer.write_batch(np.zeros(3), np.zeros(3), np.ones(3), np.zeros((3, 2)), None, {"x": 0})
    assert buffer.read().prev_action.tolist() == [[0.0]] * 3  # None: a reset's zero actions


def _nested_buffer(batch_size: int, image: int) -> TimeStepBuffer:
    """Dict observations (an int8 image and a float vector), a two-leaf action."""
    observation = CompositeSpec(
        {"image": TensorSpec((image, image), torch.uint8), "v": TensorSpec((3,), torch.float64)}
    )
    action = CompositeSpec({"a": TensorSpec((2,), torch.float32), "b": TensorSpec((), torch.int64)})
    return TimeStepBuffer(
        observation, action, CompositeSpec({"x": TensorSpec((), torch.float32)}), batch_size
    )


@pytest.mark.parametrize("image", [2, 64])  # a small block: one byte gather; a large: per field
def test_a_row_gather_reads_the_chosen_rows_as_a_full_read_indexes_them(image):
    source = _nested_buffer(6, image)
    assert (source.resized(4).layout.nbytes <= GATHER_INDEX_BYTES) == (image == 2)
    for name, array in source.arrays.items():  # every row of every field distinct
        if name != "env_id":
            array[...] = np.arange(array.size).reshape(array.shape) + 7 * len(name)
    rows = [4, 5, 0, 1]  # two workers' envs, out of order
    gather = RowGather(source, rows, source.resized(4))
    assert isinstance(gather.index, np.ndarray)
    got, whole = gather.read(), source.read()
    want = whole[torch.tensor(rows)]
    for path, leaf in flatten_with_paths(got.to_dict(False)):
        assert leaf.equal(dict(flatten_with_paths(want.to_dict(False)))[path]), path
    assert got.env_id.tolist() == rows
    source.arrays["reward"][4] = -1.0  # a later read sees the rows as they are then
    assert gather.read().reward[0] == -1.0 and got.reward[0] != -1.0
    assert RowGather(source, [2, 3], source.resized(2)).index == slice(2, 4)
    with pytest.raises(ValueError, match="target has 3 rows, expected 2"):
        RowGather(source, [2, 3], source.resized(3))
