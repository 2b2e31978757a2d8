import pytest
import torch
from tensordict import TensorDict

from cadence.data.dict_tensor import DictTensor
from cadence.data.temporal_dict_tensor import TemporalDictTensor


def make() -> DictTensor:
    return DictTensor(
        {
            "agent_state/h": torch.arange(12.0).view(3, 4),
            "agent_state/c": torch.arange(3),
            "action": torch.tensor([10, 11, 12]),
        }
    )


def assert_same(actual: DictTensor, expected: dict) -> None:
    got = actual.to_dict()
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


def test_flat_and_nested_keys_build_the_same_dict_tensor():
    h, c, a = torch.randn(3, 4), torch.randn(3, 2), torch.randn(3)
    flat = DictTensor({"agent_state/h": h, "agent_state/c": c, "action": a})
    nested = DictTensor({"agent_state": {"h": h, "c": c}, "action": a})
    mixed = DictTensor({"agent_state": {"h": h}, "agent_state/c": c, "action": a})
    for dt in (nested, mixed):
        assert sorted(dt.keys()) == sorted(flat.keys())
        for key in flat.keys():
            assert dt[key] is flat[key]


def test_getitem_by_flat_and_nested_key():
    dt = make()
    assert torch.equal(dt["agent_state/h"], torch.arange(12.0).view(3, 4))
    group = dt["agent_state"]
    assert isinstance(group, DictTensor)
    assert sorted(group.keys()) == ["c", "h"]
    assert group["h"] is dt["agent_state/h"]
    assert "agent_state/c" in dt and "agent_state" in dt and "agent_state/x" not in dt


def test_values_may_be_dict_tensors_or_tensordicts():
    inner = DictTensor({"h": torch.zeros(2, 3)})
    td = TensorDict({"x": torch.ones(2)}, batch_size=[2])
    dt = DictTensor({"agent_state": inner, "obs": td})
    assert sorted(dt.keys()) == ["agent_state/h", "obs/x"]
    assert DictTensor.from_tensordict(td)["x"] is td["x"]


def test_basic_properties():
    dt = make()
    assert dt.n_elems() == 3 and len(dt) == 3
    assert dt.device() == torch.device("cpu")
    assert not dt.empty()
    assert DictTensor().empty() and DictTensor().n_elems() == 0
    empty = DictTensor({}, batch_size=4)
    assert empty.empty() and empty.n_elems() == 4


def test_index_rows_by_int_slice_tensor_and_mask():
    dt = make()
    assert_same(dt[1], {k: v[1:2] for k, v in dt.to_dict().items()})
    assert_same(dt[-1], {k: v[2:3] for k, v in dt.to_dict().items()})
    assert_same(dt[1:], {k: v[1:] for k, v in dt.to_dict().items()})
    rows = torch.tensor([2, 0])
    assert_same(dt[rows], {k: v[rows] for k, v in dt.to_dict().items()})
    assert_same(dt[[2, 0]], {k: v[rows] for k, v in dt.to_dict().items()})
    mask = torch.tensor([True, False, True])
    assert_same(dt[mask], {k: v[mask] for k, v in dt.to_dict().items()})
    assert_same(dt[[True, False, True]], {k: v[mask] for k, v in dt.to_dict().items()})
    assert dt[torch.tensor(1)]["action"].tolist() == [11]


def test_index_errors():
    dt = make()
    with pytest.raises(IndexError, match="row 3 is out of range for a batch of 3"):
        dt[3]
    with pytest.raises(ValueError, match=r"shape \[3\]"):
        dt[torch.tensor([True, False])]
    with pytest.raises(ValueError, match=r"shape \[3\]"):
        dt[[True, False]]  # a list of bools is a mask, not the rows 1 and 0
    with pytest.raises(ValueError, match=r"shape \[3\]"):
        dt[torch.tensor(True)]
    with pytest.raises(TypeError, match="mixes bools and ints"):
        dt[[True, 0, 1]]
    with pytest.raises(TypeError, match="row mask"):
        dt[True]
    with pytest.raises(KeyError, match="no key 'agent_state/x'.*agent_state/h"):
        dt["agent_state/x"]


def test_truncate_and_prepend_key():
    dt = make()
    state = dt.truncate_key("agent_state/")
    assert_same(state, {"h": dt["agent_state/h"], "c": dt["agent_state/c"]})
    assert state.n_elems() == 3
    assert dt.truncate_key("nothing/").empty() and dt.truncate_key("nothing/").n_elems() == 3
    moved = dt.prepend_key("_observation/")
    assert sorted(moved.keys()) == ["_observation/action", "_observation/agent_state/c",
                                    "_observation/agent_state/h"]  # fmt: skip
    assert moved["_observation/action"] is dt["action"]
    # rlstructures' idiom: a prefix without '/' is a plain string prefix.
    assert sorted(dt.prepend_key("_").truncate_key("_").keys()) == sorted(dt.keys())
    assert dt.prepend_key("_")["_agent_state"]["h"] is dt["agent_state/h"]


def test_truncate_key_without_slash_says_how_to_fix_it():
    with pytest.raises(ValueError, match="end the prefix with '/': 'agent_state/'"):
        make().truncate_key("agent_state")


def test_cat_along_the_batch_dim():
    a, b = make(), make()[:2]
    both = DictTensor.cat([a, b])
    assert both.n_elems() == 5
    assert_same(both, {k: torch.cat([a[k], b[k]]) for k in a.keys()})


def test_cat_errors_name_the_problem():
    empty = DictTensor.cat([])  # as rlstructures: no keys, no rows
    assert empty.empty() and empty.n_elems() == 0
    other = DictTensor({"action": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"only in item 0: \['agent_state/c', 'agent_state/h'\]"):
        DictTensor.cat([make(), other])
    meta = make().to("meta")
    with pytest.raises(ValueError, match="item 1 is on meta, item 0 on cpu"):
        DictTensor.cat([make(), meta])


def test_set_checks_and_stores_in_place():
    dt = make()
    value = torch.ones(3, 2)
    dt.set("agent_info/logits", value)
    assert dt["agent_info/logits"] is value and dt["agent_info"]["logits"] is value
    with pytest.raises(
        ValueError, match=r"key 'x' has batch shape \[2\] but the batch size is \[3\]"
    ):
        dt.set("x", torch.zeros(2))
    with pytest.raises(ValueError, match="key 'x' is on meta but the container is on cpu"):
        dt.set("x", torch.zeros(3, device="meta"))
    with pytest.raises(ValueError, match="'action' is a tensor"):
        dt.set("action/x", torch.zeros(3))
    with pytest.raises(TypeError, match="not a tensor"):
        dt.set("x", [1, 2, 3])
    assert "x" not in dt


def test_set_on_an_empty_dict_tensor_takes_the_batch_size():
    dt = DictTensor()
    dt.set("a/b", torch.zeros(5, 2))
    assert dt.n_elems() == 5 and dt.keys() == ["a/b"]


def test_construction_errors_name_the_key():
    with pytest.raises(ValueError, match=r"key 'b' has batch shape \[4\] but key 'a' is \[3\]"):
        DictTensor({"a": torch.zeros(3), "b": torch.zeros(4, 2)})
    with pytest.raises(ValueError, match="key 'b' is on meta but key 'a' is on cpu"):
        DictTensor({"a": torch.zeros(3), "b": torch.zeros(3, device="meta")})
    with pytest.raises(ValueError, match=r"'loss' is a 0-d tensor .* plain dict"):
        DictTensor({"loss": torch.tensor(1.0)})  # how rlalgos returns losses
    with pytest.raises(ValueError, match="fewer than 2 batch dims"):
        TemporalDictTensor({"a": torch.zeros(3)})
    with pytest.raises(ValueError, match="given twice"):
        DictTensor({"a/b": torch.zeros(3), "a": {"b": torch.zeros(3)}})
    with pytest.raises(ValueError, match="'a' is a tensor, so it cannot also hold 'a/b'"):
        DictTensor({"a": torch.zeros(3), "a/b": torch.zeros(3)})
    with pytest.raises(ValueError, match="empty part"):
        DictTensor({"a//b": torch.zeros(3)})
    with pytest.raises(TypeError, match="key 'a' is a str, not a tensor"):
        DictTensor({"a": "text"})
    with pytest.raises(ValueError, match=r"batch size is \[2\]"):
        DictTensor({"a": torch.zeros(3)}, batch_size=2)


def test_clone_detach_and_to_copy_or_share_as_torch_does():
    dt = DictTensor({"x": torch.ones(2, requires_grad=True)})
    clone = dt.clone()
    assert torch.equal(clone["x"], dt["x"]) and clone["x"].data_ptr() != dt["x"].data_ptr()
    detached = dt.detach()
    assert not detached["x"].requires_grad and detached["x"].data_ptr() == dt["x"].data_ptr()
    moved = dt.to("cpu")
    assert moved.device() == torch.device("cpu") and moved["x"] is dt["x"]
    on_meta = dt.to("meta")
    assert on_meta.device() == torch.device("meta") and on_meta["x"].device.type == "meta"


def test_unfold_and_iteration_give_rows_of_one():
    dt = make()
    rows = dt.unfold()
    assert [row.n_elems() for row in rows] == [1, 1, 1]
    assert [int(row["action"]) for row in dt] == [10, 11, 12]
    assert torch.equal(rows[2]["agent_state/h"], dt["agent_state/h"][2:3])
    assert DictTensor({}, batch_size=0).unfold() == []


def test_repr_lists_keys_shapes_and_device():
    text = repr(make())
    assert text.startswith("DictTensor(n_elems=3, device=cpu")
    assert "agent_state/h: float32[3, 4]" in text and "action: int64[3]" in text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_to_cuda_and_back():
    dt = make()
    on_gpu = dt.to("cuda")
    assert on_gpu.device().type == "cuda" and on_gpu["agent_state/h"].is_cuda
    assert DictTensor({"x": torch.zeros(2, device="cuda")}, device="cuda").n_elems() == 2
    assert_same(on_gpu.to("cpu"), make().to_dict())
    with pytest.raises(ValueError, match="on cuda"):
        DictTensor({"a": torch.zeros(2), "b": torch.zeros(2, device="cuda")})
