"""ImageScaleTransformer: uint8 leaves to floats in [minimum, maximum], other leaves kept."""

import pytest
import torch

from cadence.data.specs import BoundedTensorSpec, CompositeSpec, TensorSpec
from cadence.transforms import ImageScaleTransformer


def test_uint8_leaves_are_scaled_and_the_spec_follows(
    make_time_step, make_steps, make_buffer, window
):
    spec = CompositeSpec(
        {"pixels": BoundedTensorSpec((1, 2, 2), torch.uint8, 0, 255), "speed": TensorSpec((1,))}
    )
    scale = ImageScaleTransformer(spec, minimum=-1.0, maximum=1.0)
    assert scale.paths == ("pixels",)
    pixels = torch.tensor([0, 51, 204, 255], dtype=torch.uint8).view(1, 1, 2, 2)
    observation = {"pixels": pixels, "speed": torch.tensor([[3.0]])}
    step, _ = scale.transform_time_step(make_time_step([0], observation=observation), ())
    torch.testing.assert_close(
        step.observation["pixels"], torch.tensor([-1.0, -0.6, 0.6, 1.0]).view(1, 1, 2, 2)
    )
    assert torch.equal(step.observation["speed"], observation["speed"])
    out = scale.transformed_observation_spec(spec)
    assert out["pixels"].dtype == torch.float32 and float(out["pixels"].minimum.min()) == -1.0
    assert out["pixels"].contains(step.observation["pixels"][0])
    buffer = make_buffer(
        make_steps([[0]], observation={k: v.unsqueeze(0) for k, v in observation.items()})
    )
    replayed = scale.transform_sample(window(buffer, [0], [[0]]))
    torch.testing.assert_close(
        replayed.time_step.observation["pixels"][0], step.observation["pixels"]
    )
    assert buffer.gather_all()["time_step"]["observation"]["pixels"].dtype == torch.uint8


def test_an_observation_without_uint8_images_is_refused():
    with pytest.raises(ValueError, match="no observation leaf is a uint8 image"):
        ImageScaleTransformer(TensorSpec((4,)))
