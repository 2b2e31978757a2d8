"""Counter-based random numbers for tensor-native envs: env ``i`` depends on ``seed + i`` only.

One ``torch.Generator`` for a whole batch would make env ``i``'s episodes depend
on the batch size (row ``i`` takes the ``i``-th slice of each draw). Instead every
env has its own SplitMix64 stream (Steele, Lea and Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014), evaluated by position rather than
by advancing a state: env ``i`` with seed ``s = seed + i`` has the key
``mix64(s)``, and its ``n``-th output is ``mix64(key + (n + 1) * GOLDEN_GAMMA)``,
exactly what a sequential SplitMix64 seeded with ``key`` would produce. Episode
``e`` of an env uses outputs ``e * k`` .. ``e * k + k - 1`` for its ``k`` reset
uniforms, so the start of every episode is a pure function of ``(seed + i, e)``,
computed for any set of rows in a few element-wise int64 ops with no Python loop
over envs, identically on every device.

torch has no usable unsigned 64-bit arithmetic, so the mixing runs on int64:
additions and multiplications wrap modulo 2^64 as unsigned ones do, and logical
right shifts mask off the sign bits an arithmetic shift drags in.
"""

from __future__ import annotations

import math

import numpy as np
import torch

# SplitMix64's constants (Steele et al. 2014; Vigna's splitmix64.c) as signed int64.
GOLDEN_GAMMA = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)
_MASK = (1 << 64) - 1
_NUMPY_MIX1, _NUMPY_MIX2 = np.uint64(_MIX1 & _MASK), np.uint64(_MIX2 & _MASK)
_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}


class EpisodeStreams:
    """The reset uniforms of every episode of a batch of envs, one SplitMix64 stream per env.

    Two implementations give the same numbers: `uniforms` in torch (any device, no
    host synchronisation) and, for streams on the CPU in float32 or float64,
    `uniforms_numpy` (NumPy's uint64 arithmetic wraps natively, and a NumPy
    operation on the few rows that reset in a step costs a fraction of a torch one).

    Args:
        seeds: int64 seeds ``[B]``, one per env (``seed + i`` for env ``i``).
        num_uniforms: uniforms per episode, ``k``.
        dtype: a floating dtype; each uniform keeps as many of its output's top
            bits as the dtype's significand holds (24 for float32, 53 for
            float64), so every value is exact and in ``[0, 1)``.

    >>> streams = EpisodeStreams(torch.arange(3) + 7, num_uniforms=4, dtype=torch.float64)
    >>> streams.uniforms(torch.tensor([2]), torch.tensor([0])).shape
    torch.Size([4, 1])
    """

    def __init__(self, seeds: torch.Tensor, num_uniforms: int, dtype: torch.dtype):
        if num_uniforms < 1:
            raise ValueError(f"num_uniforms must be >= 1, got {num_uniforms}")
        self.num_uniforms = num_uniforms
        self.dtype = dtype
        self.keys = mix64(seeds.to(torch.int64))
        # Output n of a stream is mix64(key + (n + 1) * GOLDEN_GAMMA); episode e takes
        # n = e * k + j for j < k: key + e * (k * GOLDEN_GAMMA) + (j + 1) * GOLDEN_GAMMA.
        self._episode_stride = _wrap(num_uniforms * GOLDEN_GAMMA)
        component = torch.arange(1, num_uniforms + 1, dtype=torch.int64, device=seeds.device)
        self._component_offsets = component.mul_(GOLDEN_GAMMA).unsqueeze(1)
        self._significand = round(-math.log2(torch.finfo(dtype).eps)) + 1
        self._scale = 2.0**-self._significand
        self._numpy_dtype = _NUMPY_DTYPES.get(dtype) if self.keys.device.type == "cpu" else None
        if self._numpy_dtype is not None:
            self._numpy_keys = self.keys.numpy().view(np.uint64)
            self._numpy_offsets = self._component_offsets.numpy().view(np.uint64)
            self._numpy_stride = np.uint64(self._episode_stride & _MASK)

    @property
    def supports_numpy(self) -> bool:
        """Whether `uniforms_numpy` is available (streams on the CPU, float32 or float64)."""
        return self._numpy_dtype is not None

    def uniforms(self, rows: torch.Tensor, episodes: torch.Tensor) -> torch.Tensor:
        """``[k, R]`` uniforms for episode ``episodes[r]`` of env ``rows[r]``.

        Args:
            rows: env indices ``[R]`` (int64, on the streams' device).
            episodes: their episode numbers ``[R]`` (int64; 0 is an env's first episode).
        """
        position = torch.add(self.keys[rows], episodes, alpha=self._episode_stride)
        bits = mix64_(position.unsqueeze(0) + self._component_offsets)
        uniform = _shift_right(bits, 64 - self._significand).to(self.dtype)
        return uniform.mul_(self._scale)

    def uniforms_numpy(self, rows: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        """`uniforms` with NumPy arrays in and out (see `supports_numpy`).

        Raises:
            RuntimeError: the streams are not on the CPU in float32 or float64.
        """
        if self._numpy_dtype is None:
            raise RuntimeError(
                f"uniforms_numpy needs streams on the CPU in float32 or float64, these are "
                f"{self.dtype} on {self.keys.device}; use uniforms()"
            )
        # uint64 arrays wrap on overflow (silently, unlike NumPy scalars).
        position = episodes.view(np.uint64) * self._numpy_stride + self._numpy_keys[rows]
        bits = position[None] + self._numpy_offsets
        bits ^= bits >> 30
        bits *= _NUMPY_MIX1
        bits ^= bits >> 27
        bits *= _NUMPY_MIX2
        bits ^= bits >> 31
        uniform = (bits >> (64 - self._significand)).astype(self._numpy_dtype)
        uniform *= self._scale
        return uniform


def mix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function on int64 bit patterns, as a fresh tensor."""
    return mix64_(z.clone())


def mix64_(z: torch.Tensor) -> torch.Tensor:
    """`mix64` in place on ``z``; returns ``z``."""
    z.bitwise_xor_(_shift_right(z, 30)).mul_(_MIX1)
    z.bitwise_xor_(_shift_right(z, 27)).mul_(_MIX2)
    return z.bitwise_xor_(_shift_right(z, 31))


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """The logical (unsigned) right shift of int64 bit patterns."""
    return z.bitwise_right_shift(bits).bitwise_and_((1 << (64 - bits)) - 1)


def _wrap(value: int) -> int:
    """``value`` modulo 2^64 as a signed int64."""
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value
