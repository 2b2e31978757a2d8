"""Specs: the shape, dtype and bounds of every tensor an environment exchanges.

Three leaf kinds and one composite:

- `TensorSpec`: unbounded values of a shape and dtype;
- `BoundedTensorSpec`: values in ``[minimum, maximum]`` (element-wise);
- `DiscreteTensorSpec`: integers in ``[0, nvec)`` (``Discrete``, ``MultiDiscrete``,
  ``MultiBinary``);
- `CompositeSpec`: a ``dict`` of specs (``Dict`` and ``Tuple`` spaces; a tuple's
  items are keyed ``"0"``, ``"1"``, ...), itself a nest that `map_structure` walks.

``shape`` never includes the batch dimension; ``zeros``/``sample`` take an
``outer_shape`` that is prepended.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, TypeAlias

import gymnasium as gym
import numpy as np
import torch

Shape: TypeAlias = tuple[int, ...]


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


def torch_dtype(dtype: np.dtype | type) -> torch.dtype:
    return torch.from_numpy(np.empty((), dtype=dtype)).dtype


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """An unbounded tensor of ``shape`` and ``dtype``."""

    shape: Shape
    dtype: torch.dtype = torch.float32

    @property
    def numpy_dtype(self) -> np.dtype:
        return numpy_dtype(self.dtype)

    @property
    def is_discrete(self) -> bool:
        return False

    def zeros(self, outer_shape: Sequence[int] = (), device: Any = None) -> torch.Tensor:
        return torch.zeros((*outer_shape, *self.shape), dtype=self.dtype, device=device)

    def numpy_zeros(self, outer_shape: Sequence[int] = ()) -> np.ndarray:
        return np.zeros((*outer_shape, *self.shape), dtype=self.numpy_dtype)

    def sample(
        self,
        outer_shape: Sequence[int] = (),
        generator: torch.Generator | None = None,
        device: Any = None,
    ) -> torch.Tensor:
        """Standard-normal samples (there are no bounds to be uniform within)."""
        shape = (*outer_shape, *self.shape)
        if self.dtype.is_floating_point:
            return torch.randn(shape, generator=generator, dtype=self.dtype).to(device)
        return torch.randint(-100, 100, shape, generator=generator, dtype=self.dtype).to(device)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` (with any outer dims) has this spec's trailing shape and dtype."""
        value = torch.as_tensor(value)
        return value.dtype == self.dtype and _has_trailing_shape(value, self.shape)


@dataclasses.dataclass(frozen=True)
class BoundedTensorSpec(TensorSpec):
    """A tensor whose values lie in ``[minimum, maximum]`` element-wise."""

    minimum: Any = 0.0
    maximum: Any = 1.0

    def __post_init__(self) -> None:
        dtype = self.numpy_dtype
        for name in ("minimum", "maximum"):
            bound = np.broadcast_to(np.asarray(getattr(self, name), dtype=dtype), self.shape)
            object.__setattr__(self, name, bound.copy())
        if np.any(self.minimum > self.maximum):
            raise ValueError(f"minimum {self.minimum} exceeds maximum {self.maximum}")

    def sample(
        self,
        outer_shape: Sequence[int] = (),
        generator: torch.Generator | None = None,
        device: Any = None,
    ) -> torch.Tensor:
        """Uniform samples in the bounds (normal where a bound is infinite)."""
        shape = (*outer_shape, *self.shape)
        low = torch.as_tensor(self.minimum, dtype=torch.float64)
        high = torch.as_tensor(self.maximum, dtype=torch.float64)
        if not self.dtype.is_floating_point:
            u = torch.rand(shape, generator=generator, dtype=torch.float64)
            values = torch.floor(low + u * (high - low + 1)).clamp(max=high)
            return values.to(self.dtype).to(device)
        finite = torch.isfinite(low) & torch.isfinite(high)
        u = torch.rand(shape, generator=generator, dtype=torch.float64)
        uniform = low.nan_to_num(0.0) + u * (high - low).nan_to_num(0.0, posinf=0.0)
        normal = torch.randn(shape, generator=generator, dtype=torch.float64)
        values = torch.where(finite, uniform, normal).clamp(low, high)
        return values.to(self.dtype).to(device)

    def __repr__(self) -> str:
        return (
            f"BoundedTensorSpec(shape={tuple(self.shape)}, dtype={self.dtype}, "
            f"minimum={_bound_repr(self.minimum)}, maximum={_bound_repr(self.maximum)})"
        )

    def contains(self, value: Any) -> bool:
        value = torch.as_tensor(value)
        if not super().contains(value):
            return False
        low = torch.as_tensor(self.minimum, dtype=self.dtype, device=value.device)
        high = torch.as_tensor(self.maximum, dtype=self.dtype, device=value.device)
        return bool(((value >= low) & (value <= high)).all())


@dataclasses.dataclass(frozen=True)
class DiscreteTensorSpec(TensorSpec):
    """Integers in ``[0, nvec)`` element-wise; ``nvec`` has this spec's shape."""

    dtype: torch.dtype = torch.int64
    nvec: Any = 2

    def __post_init__(self) -> None:
        nvec = np.broadcast_to(np.asarray(self.nvec, dtype=np.int64), self.shape).copy()
        object.__setattr__(self, "nvec", nvec)

    def __repr__(self) -> str:
        return (
            f"DiscreteTensorSpec(shape={tuple(self.shape)}, dtype={self.dtype}, "
            f"nvec={_bound_repr(self.nvec)})"
        )

    @property
    def is_discrete(self) -> bool:
        return True

    @property
    def num_values(self) -> int:
        """The number of values of a scalar spec (e.g. the number of actions)."""
        if self.shape != ():
            raise ValueError(f"num_values is for scalar discrete specs, this one is {self.shape}")
        return int(self.nvec)

    @property
    def minimum(self) -> np.ndarray:
        return np.zeros(self.shape, dtype=np.int64)

    @property
    def maximum(self) -> np.ndarray:
        return self.nvec - 1

    def sample(
        self,
        outer_shape: Sequence[int] = (),
        generator: torch.Generator | None = None,
        device: Any = None,
    ) -> torch.Tensor:
        shape = (*outer_shape, *self.shape)
        u = torch.rand(shape, generator=generator, dtype=torch.float64)
        values = torch.floor(u * torch.as_tensor(self.nvec, dtype=torch.float64))
        return values.to(self.dtype).to(device)

    def contains(self, value: Any) -> bool:
        value = torch.as_tensor(value)
        if not super().contains(value):
            return False
        nvec = torch.as_tensor(self.nvec, device=value.device)
        return bool(((value >= 0) & (value < nvec)).all())


def _bound_repr(bound: np.ndarray) -> str:
    """One number where every element is the same (an image's 0 and 255), else the array on
    one line, summarised past a few elements: a spec in an error message stays readable."""
    flat = np.asarray(bound).reshape(-1)
    if flat.size and np.array_equal(flat, np.full_like(flat, flat[0]), equal_nan=True):
        return repr(flat[0].item())
    text = np.array2string(np.asarray(bound), separator=", ", threshold=16, edgeitems=3)
    return " ".join(text.split())


class CompositeSpec(dict):
    """A ``dict`` of specs (leaf specs or nested `CompositeSpec`)."""

    def zeros(self, outer_shape: Sequence[int] = (), device: Any = None) -> dict[str, Any]:
        return {k: v.zeros(outer_shape, device) for k, v in self.items()}

    def numpy_zeros(self, outer_shape: Sequence[int] = ()) -> dict[str, Any]:
        return {k: v.numpy_zeros(outer_shape) for k, v in self.items()}

    def sample(
        self,
        outer_shape: Sequence[int] = (),
        generator: torch.Generator | None = None,
        device: Any = None,
    ) -> dict[str, Any]:
        return {k: v.sample(outer_shape, generator, device) for k, v in self.items()}

    def contains(self, value: Any) -> bool:
        if not isinstance(value, dict) or set(value) != set(self):
            return False
        return all(spec.contains(value[k]) for k, spec in self.items())

    @property
    def is_discrete(self) -> bool:
        return False


Spec: TypeAlias = TensorSpec | CompositeSpec


def _has_trailing_shape(value: torch.Tensor, shape: Shape) -> bool:
    if value.dim() < len(shape):
        return False
    return tuple(value.shape[value.dim() - len(shape) :]) == tuple(shape)


def spec_from_space(space: gym.Space) -> Spec:
    """The spec of a Gymnasium space; 64-bit floats become float32.

    A ``Discrete`` or ``MultiDiscrete`` space's values are counted from its ``start``: the
    spec holds ``value - start``, from 0 (`GymAdapter` shifts the values both ways).

    Raises:
        TypeError: for space types with no tensor form (``Text``, ``Graph``, ...).
    """
    if isinstance(space, gym.spaces.Box):
        dtype = np.float32 if np.issubdtype(space.dtype, np.floating) else space.dtype
        if np.all(np.isinf(space.low)) and np.all(np.isinf(space.high)):
            return TensorSpec(space.shape, torch_dtype(dtype))
        return BoundedTensorSpec(space.shape, torch_dtype(dtype), space.low, space.high)
    if isinstance(space, gym.spaces.Discrete):
        return DiscreteTensorSpec((), torch.int64, int(space.n))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return DiscreteTensorSpec(space.shape, torch.int64, space.nvec)
    if isinstance(space, gym.spaces.MultiBinary):
        return DiscreteTensorSpec(space.shape, torch.int8, 2)
    if isinstance(space, gym.spaces.Dict):
        return CompositeSpec({k: spec_from_space(s) for k, s in space.spaces.items()})
    if isinstance(space, gym.spaces.Tuple):
        return CompositeSpec({str(i): spec_from_space(s) for i, s in enumerate(space.spaces)})
    raise TypeError(
        f"cadence has no tensor form for {type(space).__name__} spaces; wrap the env so that "
        "it uses Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple spaces"
    )
