import pytest
import torch

from cadence.data.errors import UnsupportedSpaceError
from cadence.data.specs import BoundedTensorSpec, CompositeSpec, DiscreteTensorSpec, TensorSpec
from cadence.networks.config import NetworkConfig
from cadence.networks.encoders import (
    DictEncoder,
    FlattenEncoder,
    ImageEncoder,
    OneHotEncoder,
    is_image,
    make_encoder,
)

SMALL = NetworkConfig(cnn="small")


def image_spec(size: int, channels: int = 3) -> BoundedTensorSpec:
    return BoundedTensorSpec((channels, size, size), torch.uint8, 0, 255)


def test_vector_and_scalar_observations_flatten():
    encoder = make_encoder(TensorSpec((2, 3)))
    assert isinstance(encoder, FlattenEncoder) and encoder.output_dim == 6
    assert encoder(torch.zeros(5, 7, 2, 3)).shape == (5, 7, 6)
    assert make_encoder(TensorSpec(()))(torch.zeros(4)).shape == (4, 1)


def test_discrete_observations_are_one_hot():
    encoder = make_encoder(DiscreteTensorSpec((2,), nvec=[3, 2]))
    assert isinstance(encoder, OneHotEncoder) and encoder.output_dim == 5
    features = encoder(torch.tensor([[2, 0], [0, 1]]))
    assert torch.equal(features, torch.tensor([[0.0, 0, 1, 1, 0], [1, 0, 0, 0, 1]]))
    scalar = make_encoder(DiscreteTensorSpec((), nvec=4))
    assert torch.equal(scalar(torch.tensor([3])), torch.tensor([[0.0, 0, 0, 1]]))


@pytest.mark.parametrize(
    "size, config, output_dim",
    [(84, NetworkConfig(), 512), (64, NetworkConfig(), 512), (64, SMALL, 256)],
)
def test_uint8_images(size, config, output_dim):
    encoder = make_encoder(image_spec(size), config)
    assert isinstance(encoder, ImageEncoder) and encoder.output_dim == output_dim
    pixels = torch.randint(0, 256, (2, 3, 3, size, size), dtype=torch.uint8)
    features = encoder(pixels)
    assert features.shape == (2, 3, output_dim) and features.dtype == torch.float32


def test_uint8_is_scaled_by_1_over_255_and_float_is_not():
    torch.manual_seed(0)
    pixels = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    uint8_encoder = ImageEncoder(image_spec(64), "small")
    float_encoder = ImageEncoder(TensorSpec((3, 64, 64)), "small")
    float_encoder.load_state_dict(uint8_encoder.state_dict())
    torch.testing.assert_close(uint8_encoder(pixels), float_encoder(pixels.float() / 255))
    assert not torch.allclose(uint8_encoder(pixels), float_encoder(pixels.float()))


def test_nature_cnn_adapts_to_rectangular_sizes_and_refuses_tiny_ones():
    encoder = ImageEncoder(TensorSpec((4, 36, 100)), "nature")
    assert encoder(torch.zeros(2, 4, 36, 100)).shape == (2, 512)
    assert ImageEncoder(TensorSpec((1, 8, 8)), "small")(torch.zeros(1, 1, 8, 8)).shape == (1, 256)
    with pytest.raises(UnsupportedSpaceError, match="set network.cnn=small"):
        ImageEncoder(TensorSpec((3, 32, 32)), "nature")
    # Gymnasium's [H, W, C] layout: the error names the wrapper that makes it [C, H, W].
    with pytest.raises(UnsupportedSpaceError, match="ImageChannelFirst"):
        ImageEncoder(TensorSpec((84, 84, 3), torch.uint8), "small")


def test_is_image():
    assert is_image(image_spec(4))  # uint8 3-D, however small
    assert is_image(TensorSpec((3, 8, 8)))
    assert not is_image(TensorSpec((3, 4, 4)))  # float 3-D but small: a tensor, not an image
    assert not is_image(TensorSpec((64, 64)))
    assert not is_image(DiscreteTensorSpec((3, 8, 8), nvec=5))
    assert not is_image(CompositeSpec({"x": TensorSpec((3, 8, 8))}))


def test_dict_observations_concatenate_per_key_encoders():
    spec = CompositeSpec(
        {
            "camera": image_spec(64),
            "joints": TensorSpec((7,)),
            "goal": CompositeSpec({"cell": DiscreteTensorSpec((), nvec=5)}),
        }
    )
    encoder = make_encoder(spec, SMALL)
    assert isinstance(encoder, DictEncoder)
    assert isinstance(encoder.encoders["camera"], ImageEncoder)
    assert encoder.output_dim == 256 + 7 + 5
    observation = spec.sample((4,))
    features = encoder(observation)
    assert features.shape == (4, 268)
    torch.testing.assert_close(features[:, 256:263], observation["joints"])
