"""`SlotRandom`: one random stream per slot of a batch, keyed by the slot's env id.

An agent that samples with torch's global generator draws for its whole batch at
once, so what slot ``i`` gets depends on which other slots share its batch: the
same envs split over one or two worker processes would act differently. Drawing
from `SlotRandom` instead, with the ``env_id`` the `Batcher` puts in every
observation, gives slot ``i`` the stream keyed by ``(seed, i)`` wherever it runs.
The uniforms (and so `bernoulli` and the draw behind `categorical`) are integer
arithmetic, the same on every machine and in every batch; `normal` takes a log and a
cosine of them, which rounded alike in batches of every size on the builds measured, but
another processor or torch build may round in the last bit otherwise. What an agent
computes from its network is another matter: see `cadence.collect.batcher.batcher`.

Each stream is SplitMix64 (Steele, Lea and Flood, 2014,
https://doi.org/10.1145/2714064.2660195): the n-th number of a stream is a mix of
``key + n * gamma``, so a batch of streams advances with a few vectorised integer
operations, and a slot's counter is all the state it has.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_ENV_SALT = np.uint64(0x632BE59BD9B4E019)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function, elementwise on uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


class SlotRandom:
    """Random numbers for a batch of slots, slot ``env_id`` drawing from its own stream.

    Every method takes ``env_id`` ``[B]`` (distinct ids, e.g. ``observation["env_id"]``)
    and returns ``[B, ...]`` on its device; the stream of id ``i`` depends only on the
    seed, ``i`` and how many numbers it has given so far.

    Args:
        seed: keys every stream (`seed` starts them again).

    >>> rng = SlotRandom(seed=0)
    >>> a = rng.uniform(torch.tensor([0, 1]))
    >>> b = SlotRandom(seed=0).uniform(torch.tensor([1]))  # id 1 alone: the same number
    >>> bool(a[1] == b[0])
    True
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed(seed)

    def seed(self, seed: int) -> None:
        """Starts every stream again, keyed by ``seed``."""
        self._seed = int(seed)
        self._counters = np.zeros(0, dtype=np.uint64)  # numbers given so far, by env id

    def uniform(self, env_id: torch.Tensor, shape: tuple[int, ...] = ()) -> torch.Tensor:
        """``[B, *shape]`` float32, uniform in ``[0, 1)``."""
        bits = self._draw(env_id, math.prod(shape))
        values = (bits >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
        return torch.from_numpy(values.reshape(-1, *shape)).to(env_id.device)

    def normal(self, env_id: torch.Tensor, shape: tuple[int, ...] = ()) -> torch.Tensor:
        """``[B, *shape]`` float32, standard normal (Box-Muller on two uniforms each)."""
        u = self.uniform(env_id, (2, *shape))
        radius = torch.sqrt(-2.0 * torch.log1p(-u[:, 0]))  # 1 - u lies in (0, 1]
        return radius * torch.cos(2.0 * math.pi * u[:, 1])

    def bernoulli(self, env_id: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """``[B, ...]`` bool, True with probability ``probs`` ``[B, ...]``."""
        return self.uniform(env_id, tuple(probs.shape[1:])) < probs

    def categorical(self, env_id: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """``[B]`` int64, a sample of the categorical distribution of ``logits`` ``[B, K]``."""
        cdf = torch.softmax(logits.detach().float(), dim=-1).cumsum(-1)
        u = self.uniform(env_id).unsqueeze(-1)
        return (u >= cdf).sum(-1).clamp(max=logits.shape[-1] - 1)

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self._seed, "counters": torch.from_numpy(self._counters.view(np.int64))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._seed = int(state["seed"])
        self._counters = state["counters"].numpy().view(np.uint64).copy()

    def _draw(self, env_id: torch.Tensor, count: int) -> np.ndarray:
        """``[B, count]`` uint64: the next ``count`` numbers of each slot's stream."""
        ids = env_id.detach().cpu().numpy().astype(np.int64).reshape(-1)
        if ids.size and ids.min() < 0:
            raise ValueError(f"env ids must be >= 0, got {ids.tolist()}")
        if ids.size and ids.max() >= self._counters.size:
            grown = np.zeros(int(ids.max()) + 1, dtype=np.uint64)
            grown[: self._counters.size] = self._counters
            self._counters = grown
        with np.errstate(over="ignore"):
            keys = _mix(
                np.uint64(self._seed & (2**64 - 1)) ^ _mix(ids.astype(np.uint64) + _ENV_SALT)
            )
            steps = self._counters[ids, None] + np.arange(1, count + 1, dtype=np.uint64)
            bits = _mix(keys[:, None] + steps * _GAMMA)
        self._counters[ids] += np.uint64(count)
        return bits
