"""The torch-free name tables of `cadence.transforms.names` agree with the transformer classes
they stand for, so checking a config by name checks what building it would."""

import typing

import pytest

from cadence.transforms import DataTransformersConfig, TransformerOrderError, names
from cadence.transforms.build import _BUILDERS


def test_every_table_names_the_same_transformers():
    listed = list(typing.get_args(names.TransformerName))
    assert list(names.TRANSFORMER_ORDER_GROUPS) == listed
    assert list(names.TRANSFORMER_CLASSES) == listed
    assert sorted(_BUILDERS) == sorted(listed)


@pytest.mark.parametrize("name", list(names.TRANSFORMER_ORDER_GROUPS))
def test_order_group_by_name_is_the_classes(name):
    assert names.TRANSFORMER_ORDER_GROUPS[name] is names.TRANSFORMER_CLASSES[name].order_group


def test_config_refuses_what_the_sequence_refuses():
    with pytest.raises(TransformerOrderError, match="hindsight_experience .* must come before"):
        DataTransformersConfig(names=["image_scale", "hindsight_experience"])
    with pytest.raises(ValueError, match="unknown data transformer 'frame_stack'; known: "):
        DataTransformersConfig(names=["frame_stack"])
