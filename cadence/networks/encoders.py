"""Observation encoders, chosen by spec: vectors, discrete values, images, Dicts.

An encoder maps an observation ``[*B, *shape]`` (any leading batch dims, e.g.
``[B]`` or ``[T, B]``) to features ``[*B, output_dim]``. Encoders carry no MLP
of their own: the networks put one body MLP after the encoder, so a Dict of a
camera and a few joint angles is encoded as CNN features concatenated with the
raw angles and mixed by that one body.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from cadence.data.errors import UnsupportedSpaceError
from cadence.data.nest import Nest
from cadence.data.specs import CompositeSpec, DiscreteTensorSpec, Spec, TensorSpec
from cadence.networks.config import CNNKind, NetworkConfig
from cadence.networks.linear import Linear
from cadence.networks.mlp import HIDDEN_GAIN

MIN_IMAGE_SIZE: dict[str, int] = {"nature": 36, "small": 8}
"""The smallest height and width each CNN accepts (below it a feature map vanishes)."""


class FlattenEncoder(nn.Module):
    """A vector (or any non-image tensor) observation as float features.

    Shapes: ``[*B, *shape] -> [*B, prod(shape)]`` (a scalar becomes one feature).
    """

    def __init__(self, spec: TensorSpec):
        super().__init__()
        self._ndim = len(spec.shape)
        self.output_dim = math.prod(spec.shape)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if self._ndim == 1:  # already [*B, features]: no reshape (an acting step's µs)
            return observation.float()
        batch_shape = observation.shape[: observation.dim() - self._ndim]
        return observation.reshape(*batch_shape, self.output_dim).float()


class OneHotEncoder(nn.Module):
    """Discrete observations (``Discrete``, ``MultiDiscrete``, ``MultiBinary``) one-hot.

    Each element gets its own block of ``nvec[i]`` features, so the result is a
    concatenation of one-hots: ``[*B, *shape] -> [*B, sum(nvec)]``. Feeding the
    integer as a float would impose an order the values do not have.
    """

    def __init__(self, spec: DiscreteTensorSpec):
        super().__init__()
        nvec = torch.as_tensor(spec.nvec, dtype=torch.int64).flatten()
        offsets = torch.cumsum(nvec, 0) - nvec
        self.register_buffer("_offsets", offsets, persistent=False)
        self._ndim = len(spec.shape)
        self.output_dim = int(nvec.sum())

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        batch_shape = observation.shape[: observation.dim() - self._ndim]
        index = observation.reshape(*batch_shape, -1).long() + self._offsets
        return F.one_hot(index, self.output_dim).sum(-2).float()


class ImageEncoder(nn.Module):
    """A CNN over channel-first images ``[*B, C, H, W] -> [*B, output_dim]``.

    uint8 pixels are scaled by 1/255 here, so the replay buffer can keep them
    as bytes; float images are taken as they are.

    - ``"nature"``: the DQN network (Mnih et al. 2015, https://www.nature.com/articles/nature14236):
      convolutions 8x8/4, 4x4/2, 3x3/1 and a 512-unit layer; any H, W >= 36.
    - ``"small"``: three 4x4/2 convolutions with padding 1 (halving H and W each,
      as in Dreamer's encoder, Hafner et al. 2020) and a 256-unit layer; for
      64x64 and smaller images, any H, W >= 8.

    Args:
        spec: the image spec, shape ``(C, H, W)``.
        kind: ``"nature"`` or ``"small"``.
        orthogonal_init: orthogonal weights with gain sqrt(2), zero biases.

    Raises:
        ValueError: if the spec is not ``(C, H, W)`` or too small for ``kind``.
    """

    def __init__(self, spec: TensorSpec, kind: CNNKind = "nature", orthogonal_init: bool = True):
        super().__init__()
        _check_image(spec, kind)
        self._scale = 1.0 / 255.0 if spec.dtype == torch.uint8 else 1.0
        self.conv = _conv_stack(spec.shape[0], kind)
        with torch.no_grad():
            flat_dim = self.conv(torch.zeros(1, *spec.shape)).shape[1]
        feature_dim = 512 if kind == "nature" else 256
        self.projection = nn.Sequential(Linear(flat_dim, feature_dim), nn.ReLU())
        self.output_dim = feature_dim
        if orthogonal_init:
            _orthogonal_(self)
        # Channels-last filters: torch's CPU convolutions run faster with them, the
        # images staying channels first (the Nature CNN's forward and backward on 256
        # Atari frames: 98 ms instead of 115). The state dict's keys and shapes are unchanged.
        self.conv.to(memory_format=torch.channels_last)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        batch_shape = observation.shape[:-3]
        images = observation.reshape(-1, *observation.shape[-3:])
        # uint8 times a Python float is float32 in one pass over the pixels.
        images = images * self._scale if images.dtype == torch.uint8 else images.float()
        return self.projection(self.conv(images)).reshape(*batch_shape, self.output_dim)


class DictEncoder(nn.Module):
    """One encoder per key of a Dict observation, features concatenated in spec order.

    Shapes: ``{key: [*B, *shape_key]} -> [*B, sum(output_dim_key)]``.

    >>> spec = CompositeSpec({"pos": TensorSpec((3,)), "cell": DiscreteTensorSpec((), nvec=5)})
    >>> DictEncoder(spec, NetworkConfig()).output_dim
    8
    """

    def __init__(self, spec: CompositeSpec, config: NetworkConfig):
        super().__init__()
        self.encoders = nn.ModuleDict({key: make_encoder(sub, config) for key, sub in spec.items()})
        self.output_dim = sum(encoder.output_dim for encoder in self.encoders.values())

    def forward(self, observation: dict[str, Nest]) -> torch.Tensor:
        features = [encoder(observation[key]) for key, encoder in self.encoders.items()]
        return torch.cat(features, dim=-1)


def is_image(spec: Spec) -> bool:
    """Channel-first images: 3-D uint8, or 3-D with height and width of at least 8."""
    if not isinstance(spec, TensorSpec) or isinstance(spec, DiscreteTensorSpec):
        return False
    if len(spec.shape) != 3:
        return False
    return spec.dtype == torch.uint8 or min(spec.shape[1:]) >= 8


def make_encoder(spec: Spec, config: NetworkConfig | None = None) -> nn.Module:
    """The encoder for observations of ``spec``; it has an ``output_dim``.

    Dict specs get a `DictEncoder`, images an `ImageEncoder` of ``config.cnn``,
    discrete specs a `OneHotEncoder`, everything else a `FlattenEncoder`.

    >>> make_encoder(TensorSpec((4,))).output_dim
    4
    """
    config = NetworkConfig() if config is None else config
    if isinstance(spec, CompositeSpec):
        return DictEncoder(spec, config)
    if is_image(spec):
        return ImageEncoder(spec, config.cnn, config.orthogonal_init)
    if isinstance(spec, DiscreteTensorSpec) and len(spec.shape) <= 1:
        return OneHotEncoder(spec)
    return FlattenEncoder(spec)


def _conv_stack(channels: int, kind: CNNKind) -> nn.Sequential:
    if kind == "nature":
        shapes = [(channels, 32, 8, 4, 0), (32, 64, 4, 2, 0), (64, 64, 3, 1, 0)]
    else:
        shapes = [(channels, 32, 4, 2, 1), (32, 64, 4, 2, 1), (64, 64, 4, 2, 1)]
    layers: list[nn.Module] = []
    for in_channels, out_channels, kernel, stride, padding in shapes:
        layers += [nn.Conv2d(in_channels, out_channels, kernel, stride, padding), nn.ReLU()]
    return nn.Sequential(*layers, nn.Flatten())


def _check_image(spec: TensorSpec, kind: CNNKind) -> None:
    if len(spec.shape) != 3:
        raise UnsupportedSpaceError(
            f"images must be channel-first (C, H, W), got shape {tuple(spec.shape)}"
        )
    if min(spec.shape[1:]) >= MIN_IMAGE_SIZE[kind]:
        return
    if spec.shape[-1] in (1, 3, 4) and spec.shape[0] > 4:
        raise UnsupportedSpaceError(
            f"the observations are images of shape {tuple(spec.shape)}, channels last "
            "(Gymnasium's [H, W, C]); the CNN takes them channels first: add the "
            "ImageChannelFirst wrapper ('env.wrappers=[{name:ImageChannelFirst}]', or the "
            "env.wrappers list of the config)"
        )
    raise UnsupportedSpaceError(
        f"the '{kind}' CNN needs height and width >= {MIN_IMAGE_SIZE[kind]}, got "
        f"{tuple(spec.shape)}; set network.cnn=small (>= 8) or resize the images"
    )


def _orthogonal_(module: nn.Module) -> None:
    """Orthogonal init with gain sqrt(2) for every conv and linear layer (as CleanRL's Atari PPO)."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.orthogonal_(layer.weight, HIDDEN_GAIN)
            nn.init.zeros_(layer.bias)
