import pytest
import torch

from cadence.data.dict_tensor import DictTensor
from cadence.data.temporal_dict_tensor import TemporalDictTensor

B, T = 3, 4


def make(lengths=(0, 2, 4)) -> TemporalDictTensor:
    """x[b, t] = 10 * b + t, so every value says where it came from."""
    x = 10 * torch.arange(B).view(B, 1) + torch.arange(T).view(1, T)
    values = {"observation/x": x, "action": {"a": x.float().unsqueeze(-1) * 0.5}}
    return TemporalDictTensor(values, torch.tensor(lengths))


def test_flat_and_nested_keys_build_the_same_tensor():
    x = torch.randn(B, T, 2)
    flat = TemporalDictTensor({"observation/x": x})
    nested = TemporalDictTensor({"observation": {"x": x}})
    assert flat.keys() == nested.keys() == ["observation/x"]
    assert nested["observation/x"] is x and nested["observation"]["x"] is x


def test_sizes_and_default_lengths():
    tdt = TemporalDictTensor({"x": torch.zeros(B, T, 5)})
    assert (tdt.n_elems(), tdt.n_steps(), len(tdt)) == (B, T, B)
    assert tdt.lengths.tolist() == [T] * B and tdt.lengths.dtype == torch.int64
    assert tdt.full() and not make().full()
    assert TemporalDictTensor({"x": torch.zeros(2, 3)}, [1, 3]).lengths.dtype == torch.int64


def test_mask_with_lengths_zero_between_and_full():
    expected = torch.tensor(
        [[False, False, False, False], [True, True, False, False], [True, True, True, True]]
    )
    mask = make().mask()
    assert mask.dtype == torch.float32 and torch.equal(mask, expected.float())
    assert torch.equal(1.0 - mask, (~expected).float())  # floats, as in rlstructures


def test_index_rows_keeps_lengths_aligned():
    tdt = make()
    assert tdt[1].lengths.tolist() == [2] and torch.equal(
        tdt[1]["observation/x"], tdt["observation/x"][1:2]
    )
    picked = tdt[torch.tensor([2, 0])]
    assert picked.lengths.tolist() == [4, 0]
    assert picked["observation/x"][:, 0].tolist() == [20, 0]
    assert tdt[torch.tensor([False, True, True])].lengths.tolist() == [2, 4]
    assert tdt[[False, True, True]].lengths.tolist() == [2, 4]
    assert tdt[1:].n_steps() == T


def test_temporal_index_by_step_and_per_row():
    tdt = make()
    step = tdt.temporal_index(1)
    assert isinstance(step, DictTensor) and step.n_elems() == B
    assert step["observation/x"].tolist() == [1, 11, 21]
    assert step["action/a"].shape == (B, 1)
    per_row = tdt.temporal_index(torch.tensor([3, 0, 2]))
    assert per_row["observation/x"].tolist() == [3, 10, 22]


def test_temporal_slice_cuts_lengths():
    part = make().temporal_slice(1, 3)
    assert part.n_steps() == 2
    assert part["observation/x"].tolist() == [[1, 2], [11, 12], [21, 22]]
    # lengths 0, 2, 4 keep max(0, l - 1) steps, at most 2.
    assert part.lengths.tolist() == [0, 1, 2]
    assert make().temporal_slice(3, None).lengths.tolist() == [0, 0, 1]
    assert make().temporal_slice(3, 1).n_steps() == 0


def test_shorten_trims_to_the_longest_row():
    short = TemporalDictTensor({"x": torch.arange(8).view(2, 4)}, torch.tensor([1, 2])).shorten()
    assert short.n_steps() == 2 and short["x"].tolist() == [[0, 1], [4, 5]]
    assert short.lengths.tolist() == [1, 2]
    assert make(lengths=(0, 0, 0)).shorten().n_steps() == 0


def test_pad_steps_pads_time_with_zeros():
    wide = make().pad_steps(6)
    assert wide.n_steps() == 6 and wide.lengths.tolist() == [0, 2, 4]
    assert wide["observation/x"][1].tolist() == [10, 11, 12, 13, 0, 0]
    assert wide["action/a"].shape == (B, 6, 1) and wide["observation/x"].dtype == torch.int64
    with pytest.raises(ValueError, match="cannot pad 4 steps to 2"):
        make().pad_steps(2)


def test_expand_pads_the_batch_with_empty_rows_as_rlstructures():
    tall = make().expand(5)
    assert tall.n_elems() == 5 and tall.n_steps() == T
    assert tall.lengths.tolist() == [0, 2, 4, 0, 0]
    assert tall["observation/x"][3:].abs().sum() == 0
    assert torch.equal(tall["observation/x"][:B], make()["observation/x"])
    with pytest.raises(ValueError, match="cannot expand 3 rows to 2"):
        make().expand(2)


def test_cat_pads_to_the_longer_time():
    short = TemporalDictTensor(
        {"observation/x": torch.full((1, 2), 7), "action/a": torch.ones(1, 2, 1)}, torch.tensor([1])
    )
    both = TemporalDictTensor.cat([make(), short])
    assert (both.n_elems(), both.n_steps()) == (4, T)
    assert both.lengths.tolist() == [0, 2, 4, 1]
    assert both["observation/x"][3].tolist() == [7, 7, 0, 0]
    assert torch.equal(both["observation/x"][:3], make()["observation/x"])
    with pytest.raises(ValueError, match="only in item 1: \\['y'\\]"):
        TemporalDictTensor.cat([make(), TemporalDictTensor({"y": torch.zeros(1, 1)})])


def test_masked_select_gives_the_valid_steps_row_by_row():
    flat = make().masked_select()
    assert isinstance(flat, DictTensor) and flat.n_elems() == 6
    assert flat["observation/x"].tolist() == [10, 11, 20, 21, 22, 23]
    custom = make().masked_select(torch.eye(B, T, dtype=torch.bool))
    assert custom["observation/x"].tolist() == [0, 11, 22]
    floats = make().masked_select(make().mask())  # 0/1 floats select as bools do
    assert floats["observation/x"].tolist() == [10, 11, 20, 21, 22, 23]
    with pytest.raises(ValueError, match="must be \\[3, 4\\]"):
        make().masked_select(torch.ones(B, 2))


def test_keys_truncate_prepend_and_set():
    tdt = make()
    obs = tdt.truncate_key("observation/")
    assert obs.keys() == ["x"] and obs.lengths is tdt.lengths
    assert sorted(tdt.prepend_key("_").keys()) == ["_action/a", "_observation/x"]
    tdt.set("reward", torch.ones(B, T))
    assert "reward" in tdt
    with pytest.raises(
        ValueError, match="key 'r' has batch shape \\[3, 5\\] but the batch size is \\[3, 4\\]"
    ):
        tdt.set("r", torch.ones(B, T + 1))


def test_construction_errors():
    with pytest.raises(ValueError, match="at least one tensor"):
        TemporalDictTensor({})
    with pytest.raises(
        ValueError, match="key 'b' has batch shape \\[3, 5\\] but key 'a' is \\[3, 4\\]"
    ):
        TemporalDictTensor({"a": torch.zeros(B, T), "b": torch.zeros(B, 5)})
    with pytest.raises(ValueError, match="fewer than 2 batch dims"):
        TemporalDictTensor({"a": torch.zeros(B)})
    with pytest.raises(ValueError, match="shape \\[3\\], got \\[2\\]"):
        TemporalDictTensor({"a": torch.zeros(B, T)}, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="in \\[0, 4\\]"):
        TemporalDictTensor({"a": torch.zeros(B, T)}, torch.tensor([1, 5, 0]))
    with pytest.raises(TypeError, match="integers"):
        TemporalDictTensor({"a": torch.zeros(B, T)}, torch.tensor([1.0, 2.0, 0.0]))
    with pytest.raises(ValueError, match="lengths are on cpu but the tensors on meta"):
        TemporalDictTensor({"a": torch.zeros(B, T, device="meta")}, torch.tensor([1, 2, 0]))


def test_to_clone_detach_and_repr():
    tdt = make()
    clone = tdt.clone()
    assert torch.equal(clone["action/a"], tdt["action/a"]) and clone.lengths is not tdt.lengths
    clone.lengths[0] = 3
    assert tdt.lengths[0] == 0
    moved = tdt.to("meta")
    assert moved.device().type == "meta" and moved.lengths.device.type == "meta"
    assert tdt.detach()["observation/x"].data_ptr() == tdt["observation/x"].data_ptr()
    text = repr(tdt)
    assert "n_elems=3, n_steps=4" in text and "lengths=[0, 2, 4]" in text
    assert "observation/x: int64[3, 4]" in text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_to_cuda_moves_lengths_and_mask():
    on_gpu = make().to("cuda")
    assert on_gpu.lengths.is_cuda and on_gpu.mask().is_cuda and on_gpu["observation/x"].is_cuda
    assert on_gpu.masked_select()["observation/x"].tolist() == [10, 11, 20, 21, 22, 23]
    assert on_gpu.to("cpu").lengths.tolist() == [0, 2, 4]
