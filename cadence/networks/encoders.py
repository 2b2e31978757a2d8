"""Observation encoders: vectors, images and Dict observations, chosen by spec."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence.data.nest import Nest
from cadence.data.specs import CompositeSpec, Spec, TensorSpec


class FlattenEncoder(nn.Module):
    """A vector (or any non-image tensor) observation ``[B, *shape]`` as ``[B, prod(shape)]`` floats."""

    def __init__(self, spec: TensorSpec):
        super().__init__()
        self.output_dim = int(torch.Size(spec.shape).numel())

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return observation.flatten(1).float()


class ImageEncoder(nn.Module):
    """A CNN over ``[B, C, H, W]`` images; uint8 pixels are scaled to [0, 1] here.

    ``"nature"`` is the DQN network (Mnih et al. 2015); ``"small"`` has two
    stride-2 convolutions, for 64x64 and smaller images.
    """

    def __init__(self, spec: TensorSpec, kind: str = "nature"):
        super().__init__()
        channels = spec.shape[0]
        self._scale = 1.0 / 255.0 if spec.dtype == torch.uint8 else 1.0
        if kind == "nature":
            layers = [
                nn.Conv2d(channels, 32, 8, 4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, 2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, 1),
                nn.ReLU(),
            ]
        else:
            layers = [nn.Conv2d(channels, 16, 4, 2), nn.ReLU(), nn.Conv2d(16, 32, 4, 2), nn.ReLU()]
        self.conv = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            self.output_dim = int(self.conv(torch.zeros(1, *spec.shape)).shape[1])

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.conv(observation.float() * self._scale)


class DictEncoder(nn.Module):
    """One encoder per key of a Dict observation, outputs concatenated in key order."""

    def __init__(self, spec: CompositeSpec, config: Any):
        super().__init__()
        self.encoders = nn.ModuleDict({key: make_encoder(sub, config) for key, sub in spec.items()})
        self.output_dim = sum(encoder.output_dim for encoder in self.encoders.values())

    def forward(self, observation: dict[str, Nest]) -> torch.Tensor:
        return torch.cat(
            [encoder(observation[key]) for key, encoder in self.encoders.items()], dim=-1
        )


def is_image(spec: Spec) -> bool:
    """Channel-first images: 3-D uint8, or 3-D with height and width of at least 8."""
    if not isinstance(spec, TensorSpec) or len(spec.shape) != 3:
        return False
    return spec.dtype == torch.uint8 or min(spec.shape[1:]) >= 8


def make_encoder(spec: Spec, config: Any) -> nn.Module:
    """The encoder for observations of ``spec``; it has an ``output_dim``."""
    if isinstance(spec, CompositeSpec):
        return DictEncoder(spec, config)
    if is_image(spec):
        return ImageEncoder(spec, config.cnn)
    return FlattenEncoder(spec)
