"""Tests of `structure`: plain dicts to attrs configs, every problem found and named."""

from __future__ import annotations

from typing import Literal

import attrs
import pytest
from attrs import field
from attrs.validators import ge, in_

from cadence.config.errors import ConfigError, close_matches
from cadence.config.structure import structure


@attrs.define(kw_only=True)
class Inner:
    size: int = field(default=2, validator=ge(1))
    mode: Literal["a", "b"] = field(default="a", validator=in_(["a", "b"]))
    sizes: tuple[int, ...] = (64, 64)


@attrs.define(kw_only=True)
class Fast:
    name: str = "fast"
    rate: float = field(default=0.1, validator=ge(0))


@attrs.define(kw_only=True)
class Slow:
    name: str = "slow"
    steps: int = 3


def _ordered(instance, attribute, value):
    if value.low > value.high:
        raise ValueError("low must not exceed high")


@attrs.define(kw_only=True)
class Bounds:
    low: int = 0
    high: int = 1


@attrs.define(kw_only=True)
class Outer:
    title: str
    inner: Inner = field(factory=Inner)
    algo: Fast | Slow = field(factory=Fast, metadata={"registry": {"fast": Fast, "slow": Slow}})
    bounds: Bounds = field(factory=Bounds, validator=_ordered)


def _problems(data):
    with pytest.raises(ConfigError) as caught:
        structure(Outer, data, "'test'")
    return {problem.key: problem for problem in caught.value.problems}


def test_builds_nested_objects_with_defaults_and_conversions():
    config = structure(
        Outer, {"title": "t", "inner": {"sizes": [8]}, "algo": {"name": "slow"}}, "'t'"
    )
    assert config == Outer(title="t", inner=Inner(sizes=(8,)), algo=Slow())


def test_every_unknown_key_and_type_error_is_reported_at_once():
    problems = _problems({"title": "t", "inner": {"sise": 3, "mode": "c"}, "algo": {"rate": "x"}})
    assert set(problems) == {"inner.sise", "inner.mode", "algo.rate"}
    assert "did you mean inner.size" in problems["inner.sise"].message
    assert "expected one of 'a', 'b'" in problems["inner.mode"].message
    assert "expected float, got str" in problems["algo.rate"].message


def test_registry_section_chooses_its_class_by_name():
    problems = _problems({"title": "t", "algo": {"name": "medium"}})
    assert problems["algo.name"].value == "medium"
    assert "expected one of 'fast', 'slow'" in problems["algo.name"].message
    assert "algo.rate" in _problems({"title": "t", "algo": {"name": "slow", "rate": 1.0}})


def test_missing_required_key_and_non_mapping_section():
    problems = _problems({"inner": 3})
    assert "missing" in problems["title"].message
    assert "expected a mapping" in problems["inner"].message


def test_validator_errors_name_the_key_and_the_constraint():
    with pytest.raises(ConfigError) as caught:
        structure(Outer, {"title": "t", "inner": {"size": 0}, "algo": {"rate": -1}}, "'test'")
    lines = str(caught.value).splitlines()
    assert lines[0] == "Invalid config 'test':"
    assert "  inner.size=0: must be >= 1" in lines
    assert "  algo.rate=-1.0: must be >= 0" in lines


def test_validator_comparing_fields_is_reported_on_its_section():
    problems = _problems({"title": "t", "bounds": {"low": 5, "high": 1}})
    assert "low must not exceed high" in problems["bounds"].message


def test_close_matches_prefers_siblings_and_same_leaf_elsewhere():
    keys = ["env.num_envs", "algorithm.num_updates_per_train_iter", "algorithm.learning_rate"]
    assert close_matches("algorithm.learnin_rate", keys) == ["algorithm.learning_rate"]
    assert close_matches("algorithm.num_envs", keys)[0] == "env.num_envs"
    assert close_matches("algorithm.zzz", keys) == []
