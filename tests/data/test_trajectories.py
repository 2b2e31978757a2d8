import pytest
import torch

from cadence.data.dict_tensor import DictTensor
from cadence.data.temporal_dict_tensor import TemporalDictTensor
from cadence.data.trajectories import Trajectories


def make(n: int = 3, n_steps: int = 4, first: int = 0) -> Trajectories:
    rows = torch.arange(first, first + n)
    info = DictTensor(
        {"agent_state/h": rows.float().unsqueeze(1).expand(n, 2), "env_info/seed": rows}
    )
    observation = rows.view(n, 1).expand(n, n_steps).float()
    steps = TemporalDictTensor(
        {
            "observation/x": observation,
            "action/a": observation.long(),
            "_observation/x": observation + 1,
        },
        torch.full((n,), n_steps),
    )
    return Trajectories(info, steps)


def test_construction_and_sizes():
    batch = make()
    assert batch.n_elems() == 3 and len(batch) == 3
    assert batch.device() == torch.device("cpu")
    assert batch.info.truncate_key("agent_state/").keys() == ["h"]


def test_mismatched_batch_sizes_are_refused():
    with pytest.raises(ValueError, match="info has 2 rows but trajectories have 3"):
        Trajectories(make()[:2].info, make().trajectories)


def test_mismatched_devices_are_refused():
    with pytest.raises(ValueError, match="info is on meta but trajectories on cpu"):
        Trajectories(make().info.to("meta"), make().trajectories)


def test_empty_info_takes_the_batch_size():
    batch = Trajectories(DictTensor(), make().trajectories)
    assert batch.info.empty() and batch.info.n_elems() == 3
    assert batch[1:].info.n_elems() == 2


def test_index_rows_of_both_parts():
    part = make()[torch.tensor([2, 0])]
    assert part.info["env_info/seed"].tolist() == [2, 0]
    assert part.trajectories["observation/x"][:, 0].tolist() == [2.0, 0.0]
    assert make()[1].n_elems() == 1
    masked = make()[[True, False, True]]
    assert masked.info["env_info/seed"].tolist() == [0, 2]
    assert masked.trajectories["observation/x"][:, 0].tolist() == [0.0, 2.0]
    with pytest.raises(TypeError, match="by rows"):
        make()["info"]


def test_cat_pads_to_the_longer_segment():
    both = Trajectories.cat([make(), make(n=2, n_steps=6, first=3)])
    assert both.n_elems() == 5 and both.trajectories.n_steps() == 6
    assert both.info["env_info/seed"].tolist() == [0, 1, 2, 3, 4]
    assert both.trajectories.lengths.tolist() == [4, 4, 4, 6, 6]
    assert both.trajectories["_observation/x"][0].tolist() == [1, 1, 1, 1, 0, 0]


def test_to_clone_detach():
    batch = make()
    moved = batch.to("meta")
    assert moved.device().type == "meta" and moved.info.device().type == "meta"
    clone = batch.clone()
    assert torch.equal(clone.info["agent_state/h"], batch.info["agent_state/h"])
    assert clone.trajectories["action/a"].data_ptr() != batch.trajectories["action/a"].data_ptr()
    assert batch.detach().info["env_info/seed"].data_ptr() == batch.info["env_info/seed"].data_ptr()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_to_cuda():
    on_gpu = make().to("cuda")
    assert on_gpu.info["agent_state/h"].is_cuda and on_gpu.trajectories.lengths.is_cuda
