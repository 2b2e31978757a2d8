import attrs
import pytest

from cadence.networks.config import NetworkConfig


def test_defaults_and_list_conversion():
    config = NetworkConfig(hidden_sizes=[256, 256])
    assert config.hidden_sizes == (256, 256)
    assert NetworkConfig().activation == "tanh"


@pytest.mark.parametrize(
    "changes",
    [
        {"hidden_sizes": (64, 0)},
        {"hidden_sizes": (64.0,)},
        {"hidden_sizes": (True,)},
        {"hidden_sizes": "64"},
        {"activation": "gelu"},
        {"cnn": "resnet"},
        {"layer_norm": 1},
        {"orthogonal_init": "yes"},
        {"share_encoder": None},
        {"action_head": "beta"},
        {"init_log_std": float("nan")},
        {"init_log_std": "0"},
    ],
)
def test_validators_reject_bad_values(changes):
    with pytest.raises((ValueError, TypeError)):
        NetworkConfig(**changes)


def test_frozen_and_every_field_documented():
    config = NetworkConfig()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.layer_norm = True
    for field in attrs.fields(NetworkConfig):
        assert field.metadata.get("doc"), field.name
