"""Every public name of rlstructures' data structures, as the porting guide's table lists
it: each works as there, or is an explicit method that raises naming cadence's form."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from cadence.data import DictTensor, TemporalDictTensor, Trajectories

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "porting-from-rlstructures.md"

RLSTRUCTURES = {
    "DictTensor": "keys __getitem__ get clone specs device n_elems empty unfold slice index "
    "cat to set prepend_key truncate_key __str__ __contains__ __add__ copy_",
    "TemporalDictTensor": "clone set specs device n_elems keys mask __getitem__ shorten unfold "
    "get slice temporal_slice index temporal_index temporal_multi_index masked_temporal_index "
    "cat to __str__ __contains__ full expand copy_ lengths",
    "Trajectories": "info trajectories to device cat n_elems sample",
}
"""The public names of rlstructures' three classes (its ``rlstructures/core.py``)."""


def table() -> dict[str, str]:
    rows = re.findall(r"^\| `(\w+\.\w+)` \| (same|raises) \|", GUIDE.read_text(), re.M)
    return dict(rows)


def dt() -> DictTensor:
    return DictTensor({"x": torch.arange(4.0), "y": torch.ones(4, 2)})


def tdt() -> TemporalDictTensor:
    return TemporalDictTensor({"x": torch.arange(12.0).reshape(3, 4)}, torch.tensor([4, 2, 0]))


def traj() -> Trajectories:
    return Trajectories(DictTensor({"agent_info/a": torch.arange(3)}), tdt())


def _copy_rows(make: Callable[[], Any]) -> None:
    target, source = make(), make()
    source["x"].add_(100)
    target.copy_(source, torch.tensor([0]), torch.tensor([1]))
    assert torch.equal(target["x"][1], source["x"][0])


CALLS: dict[str, Callable[[], Any]] = {
    "DictTensor.keys": lambda: dt().keys() == ["x", "y"],
    "DictTensor.__getitem__": lambda: dt()["x"].shape == (4,),
    "DictTensor.get": lambda: dt().get(["y"], clone=True).keys() == ["y"],
    "DictTensor.clone": lambda: dt().clone()["y"].shape == (4, 2),
    "DictTensor.specs": lambda: dt().specs()["y"] == {"size": (2,), "dtype": torch.float32},
    "DictTensor.device": lambda: dt().device() == torch.device("cpu"),
    "DictTensor.n_elems": lambda: dt().n_elems() == 4,
    "DictTensor.empty": lambda: DictTensor({}).empty() and not dt().empty(),
    "DictTensor.unfold": lambda: [d.n_elems() for d in dt().unfold()] == [1] * 4,
    "DictTensor.slice": lambda: dt().slice(1, 3)["x"].tolist() == [1.0, 2.0],
    "DictTensor.index": lambda: dt().index(1),
    "DictTensor.cat": lambda: (
        DictTensor.cat([dt(), dt()]).n_elems() == 8 and DictTensor.cat([]).empty()
    ),
    "DictTensor.to": lambda: dt().to("meta")["x"].is_meta,
    "DictTensor.set": lambda: dt().set("z", torch.zeros(4)) is None,
    "DictTensor.prepend_key": lambda: dt().prepend_key("a/").keys() == ["a/x", "a/y"],
    "DictTensor.truncate_key": lambda: (
        dt().prepend_key("a/").truncate_key("a/").keys() == ["x", "y"]
    ),
    "DictTensor.__str__": lambda: "n_elems=4" in str(dt()),
    "DictTensor.__contains__": lambda: "x" in dt() and "z" not in dt(),
    "DictTensor.__add__": lambda: (
        (dt() + DictTensor({"z": torch.zeros(4)})).keys() == ["x", "y", "z"]
    ),
    "DictTensor.copy_": lambda: _copy_rows(dt) is None,
    "TemporalDictTensor.clone": lambda: tdt().clone().lengths.tolist() == [4, 2, 0],
    "TemporalDictTensor.set": lambda: tdt().set("z", torch.zeros(3, 4)) is None,
    "TemporalDictTensor.specs": lambda: tdt().specs()["x"]["size"] == (),
    "TemporalDictTensor.device": lambda: tdt().device() == torch.device("cpu"),
    "TemporalDictTensor.n_elems": lambda: tdt().n_elems() == 3,
    "TemporalDictTensor.keys": lambda: tdt().keys() == ["x"],
    "TemporalDictTensor.mask": lambda: (1.0 - tdt().mask()).sum() == 6,
    "TemporalDictTensor.__getitem__": lambda: tdt()["x"].shape == (3, 4),
    "TemporalDictTensor.shorten": lambda: tdt()[1:].shorten().n_steps() == 2,
    "TemporalDictTensor.unfold": lambda: [t.lengths.item() for t in tdt().unfold()] == [4, 2, 0],
    "TemporalDictTensor.get": lambda: tdt().get(["x"]).keys() == ["x"],
    "TemporalDictTensor.slice": lambda: tdt().slice(1).lengths.tolist() == [2],
    "TemporalDictTensor.temporal_slice": lambda: (
        tdt().temporal_slice(1, 3).lengths.tolist() == [2, 1, 0]
    ),
    "TemporalDictTensor.index": lambda: tdt().index(0),
    "TemporalDictTensor.temporal_index": lambda: (
        tdt().temporal_index(1)["x"].tolist() == [1.0, 5.0, 9.0]
    ),
    "TemporalDictTensor.temporal_multi_index": lambda: (
        tdt().temporal_multi_index(torch.tensor([3, 1, 0]))["x"].tolist() == [3.0, 5.0, 8.0]
    ),
    "TemporalDictTensor.masked_temporal_index": lambda: (
        tdt().masked_temporal_index(2)[1].tolist() == [0]
    ),
    "TemporalDictTensor.cat": lambda: TemporalDictTensor.cat([tdt(), tdt()]).n_elems() == 6,
    "TemporalDictTensor.to": lambda: tdt().to("meta").lengths.is_meta,
    "TemporalDictTensor.__str__": lambda: "lengths=[4, 2, 0]" in str(tdt()),
    "TemporalDictTensor.__contains__": lambda: "x" in tdt(),
    "TemporalDictTensor.full": lambda: not tdt().full() and tdt()[0].full(),
    "TemporalDictTensor.expand": lambda: tdt().expand(5).lengths.tolist() == [4, 2, 0, 0, 0],
    "TemporalDictTensor.copy_": lambda: _copy_rows(tdt) is None,
    "TemporalDictTensor.lengths": lambda: tdt().lengths.dtype == torch.int64,
    "Trajectories.info": lambda: traj().info.keys() == ["agent_info/a"],
    "Trajectories.trajectories": lambda: traj().trajectories.n_steps() == 4,
    "Trajectories.to": lambda: traj().to("meta").device().type == "meta",
    "Trajectories.device": lambda: traj().device() == torch.device("cpu"),
    "Trajectories.cat": lambda: Trajectories.cat([traj(), traj()]).n_elems() == 6,
    "Trajectories.n_elems": lambda: traj().n_elems() == 3,
    "Trajectories.sample": lambda: traj().sample(2),
}


def test_the_table_lists_every_name_of_rlstructures_once():
    listed = table()
    expected = {f"{cls}.{name}" for cls, names in RLSTRUCTURES.items() for name in names.split()}
    assert set(listed) == expected
    assert set(CALLS) == expected


@pytest.mark.parametrize("name, status", sorted(table().items()))
def test_each_name_works_or_raises_naming_what_to_use(name, status):
    cls, attribute = name.split(".")
    owner = {"DictTensor": DictTensor, "TemporalDictTensor": TemporalDictTensor}.get(cls)
    if owner is not None:
        assert hasattr(owner, attribute) or attribute == "lengths", name
    if status == "same":
        assert bool(CALLS[name]()) is True, name
    else:
        with pytest.raises((TypeError, NotImplementedError)) as error:
            CALLS[name]()
        assert re.search(r"use |index rows", str(error.value)), str(error.value)
