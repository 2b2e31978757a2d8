"""Tests of `coerce` and `type_name`: config values against field annotations."""

from typing import Any, Literal

import pytest

from cadence.data.typed_fields import Mismatch, coerce, type_name


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        (3, int, 3),
        (1e6, int, 1_000_000),  # Hydra reads 1e6 as a float
        (3, float, 3.0),
        (True, bool, True),
        ("cpu", str, "cpu"),
        (None, float | None, None),
        (2, float | None, 2.0),
        ("linear", Literal["constant", "linear"], "linear"),
        ([64, 64], tuple[int, ...], (64, 64)),
        ([1, 2.0], tuple[int, float], (1, 2.0)),
        ({"render_mode": "rgb_array"}, dict[str, Any], {"render_mode": "rgb_array"}),
    ],
)
def test_coerce_accepts_and_converts(value, annotation, expected):
    result = coerce(value, annotation)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("value", "annotation", "message"),
    [
        ("abc", int, "expected int, got str"),
        (True, int, "expected int, got bool"),
        (2.5, int, "expected int, got float"),
        (False, float, "expected float, got bool"),
        (1, bool, "expected bool"),
        (3, str, "expected str, got int"),
        ("gpu", Literal["cpu", "auto"], "expected one of 'cpu', 'auto'"),
        (True, Literal[1, 2], "expected one of 1, 2"),
        ("x", float | None, "expected float | None, got str"),
        ([64, "a"], tuple[int, ...], "item 1: expected int, got str"),
        ("64", tuple[int, ...], "a list"),
        ([1, 2, 3], tuple[int, int], "2 items"),
        ([1], dict[str, Any], "a mapping"),
    ],
)
def test_coerce_refuses_naming_the_expected_type(value, annotation, message):
    with pytest.raises(Mismatch, match=message.replace("(", r"\(").replace("|", r"\|")):
        coerce(value, annotation)


def test_coerce_refuses_unsupported_annotations():
    with pytest.raises(TypeError, match="cannot be annotated"):
        coerce(1, set[int])


@pytest.mark.parametrize(
    ("annotation", "name"),
    [
        (int, "int"),
        (float | None, "float | None"),
        (Literal["a", "b"], "{'a', 'b'}"),
        (tuple[int, ...], "tuple[int, ...]"),
        (dict[str, Any], "dict[str, Any]"),
    ],
)
def test_type_name(annotation, name):
    assert type_name(annotation) == name


def test_assigning_a_wrong_type_to_a_loaded_config_names_the_field_and_type():
    from cadence.config import load_config

    config = load_config("ppo_cartpole")
    with pytest.raises(TypeError, match=r"TrainerConfig.num_env_steps = '1000': expected int"):
        config.trainer.num_env_steps = "1000"
    with pytest.raises(TypeError, match=r"EnvConfig.backend = 'paralel': expected one of"):
        config.env.backend = "paralel"
    config.algorithm.learning_rate = 1  # converted as when loaded
    assert config.algorithm.learning_rate == 1.0 and type(config.algorithm.learning_rate) is float
    with pytest.raises(ValueError, match=">= 1"):  # the range check still runs after the type's
        config.trainer.num_env_steps = 0


def test_a_literal_mismatch_suggests_the_choice_meant():
    with pytest.raises(Mismatch, match=r"did you mean 'reward_normalizer'\?$"):
        coerce("RewardNormaliser", Literal["reward_clipping", "reward_normalizer"])
    with pytest.raises(Mismatch, match=r"expected one of 'a', 'b'$"):
        coerce("zzz", Literal["a", "b"])
