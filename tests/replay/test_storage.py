"""`RingStorage`: one ring per env, wrap-around, subsets of envs, checks, clear and state."""

from __future__ import annotations

import os

import pytest
import torch

from cadence.data.specs import TensorSpec
from cadence.replay.storage import RingStorage


def _rows(values: list[list[float]]) -> dict[str, torch.Tensor]:
    """``[T, B]`` rows whose field ``x`` holds ``values`` and ``nested/y`` twice that."""
    x = torch.tensor(values, dtype=torch.float32)
    return {"x": x, "nested": {"y": (2 * x).long()}}


def _row(values: list[float]) -> dict[str, torch.Tensor]:
    """One step per env (leaves ``[B]``), as `_rows`."""
    x = torch.tensor(values, dtype=torch.float32)
    return {"x": x, "nested": {"y": (2 * x).long()}}


def _stored(storage: RingStorage, env: int) -> list[float]:
    """Env ``env``'s stored ``x``, oldest first."""
    size = int(storage.sizes[env])
    env_ids = torch.tensor([env])
    positions = storage.positions(env_ids, torch.arange(size).unsqueeze(0))
    return storage.gather(env_ids, positions)["x"][0].tolist()


def test_each_env_wraps_around_its_own_ring():
    storage = RingStorage(num_envs=2, capacity=4)
    storage.add_sequence(_rows([[0, 100], [1, 101], [2, 102]]))
    storage.add_sequence(
        _rows([[3], [4]]), env_ids=torch.tensor([0])
    )  # env 0 wraps, env 1 does not
    assert storage.num_added.tolist() == [5, 3]
    assert storage.sizes.tolist() == [4, 3]
    assert storage.write_positions.tolist() == [1, 3]
    assert storage.oldest_positions.tolist() == [1, 0]
    assert _stored(storage, 0) == [1, 2, 3, 4]
    assert _stored(storage, 1) == [100, 101, 102]
    # The raw ring of env 0: step 4 overwrote step 0 at position 0.
    assert storage.fields["x"][0].tolist() == [4, 1, 2, 3]
    assert storage.fields["nested/y"][0].tolist() == [8, 2, 4, 6]


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
def test_a_large_ring_takes_memory_as_it_is_written():
    # 2 envs x 100k steps of 3 x 64 x 64 pixels: 2.5 GB of zeros, which torch.zeros wrote
    # out in full (seconds) before the first step was stored.
    storage = RingStorage(num_envs=2, capacity=100_000)
    before = _resident_bytes()
    frames = torch.full((10, 2, 3, 64, 64), 7, dtype=torch.uint8)
    storage.add_sequence({"pixels": frames, "x": torch.ones(10, 2, dtype=torch.bfloat16)})
    assert _resident_bytes() - before < 200 * 2**20
    ring = storage.fields["pixels"]
    assert ring.shape == (2, 100_000, 3, 64, 64) and ring.dtype == torch.uint8
    assert torch.equal(ring[:, :10], frames.transpose(0, 1))
    assert not ring[:, 10:20].any()  # the steps not yet written read as zeros
    assert storage.fields["x"].dtype == torch.bfloat16  # no NumPy dtype: torch.zeros
    assert not storage.fields["x"][:, 10:].any()


def test_times_count_every_step_ever_added():
    storage = RingStorage(num_envs=1, capacity=3)
    for step in range(8):
        storage.add({"x": torch.tensor([float(step)])})
    positions = torch.tensor([[0, 1, 2]])
    # Steps 6 and 7 sit at positions 0 and 1, step 5 at position 2.
    assert storage.times(torch.tensor([0]), positions).tolist() == [[6, 7, 5]]
    assert storage.gather(torch.tensor([0]), positions)["x"].tolist() == [[6.0, 7.0, 5.0]]


def test_a_sequence_longer_than_the_ring_keeps_its_newest_steps():
    storage = RingStorage(num_envs=1, capacity=3)
    storage.add_sequence({"x": torch.arange(7.0).view(7, 1)})
    assert storage.num_added.tolist() == [7]
    assert _stored(storage, 0) == [4.0, 5.0, 6.0]


def test_adding_to_a_subset_leaves_the_other_rings_alone():
    storage = RingStorage(num_envs=3, capacity=5)
    storage.add({"x": torch.tensor([1.0, 2.0])}, env_ids=torch.tensor([2, 0]))
    assert storage.num_added.tolist() == [1, 0, 1]
    assert _stored(storage, 0) == [2.0]
    assert _stored(storage, 2) == [1.0]
    assert storage.num_steps == 2


def test_the_structure_comes_from_the_first_add_or_the_spec():
    storage = RingStorage(num_envs=2, capacity=3, spec={"x": TensorSpec((2,), torch.uint8)})
    assert storage.initialized
    assert storage.fields["x"].shape == (2, 3, 2) and storage.fields["x"].dtype == torch.uint8
    lazy = RingStorage(num_envs=2, capacity=3)
    assert not lazy.initialized
    with pytest.raises(RuntimeError, match="no fields yet"):
        _ = lazy.structure
    lazy.add(_row([1, 2])["nested"])
    assert lazy.structure == {"y": "y"}


def test_rows_that_differ_from_the_stored_ones_are_refused_with_the_key_named():
    storage = RingStorage(num_envs=2, capacity=3)
    storage.add(_row([1, 2]))
    with pytest.raises(ValueError, match="'nested/y'.*torch.float32"):
        storage.add({"x": torch.zeros(2), "nested": {"y": torch.zeros(2)}})
    with pytest.raises(ValueError, match=r"'x'.*\[1, 3\]"):
        storage.add({"x": torch.zeros(3), "nested": {"y": torch.zeros(3, dtype=torch.int64)}})
    with pytest.raises(ValueError, match="keys"):
        storage.add({"x": torch.zeros(2)})
    with pytest.raises(ValueError, match="distinct"):
        storage.add(_row([1, 2]), env_ids=torch.tensor([1, 1]))
    assert storage.num_added.tolist() == [1, 1], "a refused add must not count"


def test_clear_forgets_the_steps_and_restarts_at_position_zero():
    storage = RingStorage(num_envs=2, capacity=3)
    storage.add_sequence(_rows([[0, 1], [2, 3], [4, 5], [6, 7]]))
    storage.clear()
    assert storage.num_steps == 0 and storage.sizes.tolist() == [0, 0]
    storage.add(_row([9, 8]))
    assert storage.write_positions.tolist() == [1, 1]
    assert _stored(storage, 0) == [9.0] and _stored(storage, 1) == [8.0]


def test_state_dict_round_trip_is_exact_and_a_copy():
    storage = RingStorage(num_envs=2, capacity=3)
    storage.add_sequence(_rows([[0, 10], [1, 11], [2, 12], [3, 13]]))
    state = storage.state_dict()
    storage.add(_row([99, 99]))  # changes after the snapshot must not leak into it
    restored = RingStorage(num_envs=2, capacity=3)
    restored.load_state_dict(state)
    assert restored.num_added.tolist() == [4, 4]
    assert _stored(restored, 0) == [1, 2, 3] and _stored(restored, 1) == [11, 12, 13]
    assert restored.structure == {"x": "x", "nested": {"y": "nested/y"}}
    restored.add(_row([4, 14]))
    assert _stored(restored, 0) == [2, 3, 4]


def test_loading_a_state_of_another_size_is_refused():
    state = RingStorage(num_envs=2, capacity=3).state_dict()
    with pytest.raises(ValueError, match="2 envs x 3 steps"):
        RingStorage(num_envs=2, capacity=4).load_state_dict(state)


def test_gather_reads_only_the_asked_fields_with_the_same_values():
    storage = RingStorage(num_envs=2, capacity=4)
    storage.add_sequence(
        {
            **_rows([[0, 100], [1, 101], [2, 102]]),
            "empty": {},
            "t": (torch.zeros(3, 2), torch.ones(3, 2)),
        }
    )
    env_ids, positions = torch.tensor([1, 0]), torch.tensor([[1, 2], [0, 1]])
    full = storage.gather(env_ids, positions)
    some = storage.gather(env_ids, positions, fields=["nested", "t/1"])
    # Dict entries without a selected leaf are dropped; a tuple is kept whole.
    assert set(some) == {"nested", "t"} and set(some["nested"]) == {"y"}
    assert torch.equal(some["nested"]["y"], full["nested"]["y"])
    assert some["nested"]["y"].tolist() == [[202, 204], [0, 2]]
    assert torch.equal(some["t"][0], full["t"][0])
    assert storage.gather(env_ids, positions, fields=[]) == {}
    with pytest.raises(KeyError, match="no stored field 'nested/z'"):
        storage.gather(env_ids, positions, fields=["nested/z"])
