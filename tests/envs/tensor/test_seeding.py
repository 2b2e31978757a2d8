"""`EpisodeStreams`: per-env SplitMix64 streams evaluated by position, against a plain reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cadence.envs.tensor.seeding import GOLDEN_GAMMA, EpisodeStreams, mix64

_MASK = (1 << 64) - 1


def _reference_mix(z: int) -> int:
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK
    return z ^ (z >> 31)


def _reference_uniforms(seed: int, episode: int, k: int, bits: int) -> list[float]:
    """A sequential SplitMix64 seeded with mix64(seed), advanced to episode ``episode``."""
    state = _reference_mix(seed & _MASK)
    state = (state + episode * k * 0x9E3779B97F4A7C15) & _MASK  # skip e * k outputs
    values = []
    for _ in range(k):
        state = (state + 0x9E3779B97F4A7C15) & _MASK
        values.append((_reference_mix(state) >> (64 - bits)) / 2**bits)
    return values


def test_mix64_is_splitmix64():
    # The first output of Vigna's splitmix64.c seeded with 0.
    assert int(mix64(torch.tensor([GOLDEN_GAMMA]))[0]) & _MASK == 0xE220A8397B1DCDAF


def _uniforms(streams: EpisodeStreams, rows, episodes, path: str) -> torch.Tensor:
    rows, episodes = torch.as_tensor(rows), torch.as_tensor(episodes)
    if path == "torch":  # the path an accelerator (or a bfloat16 state) takes
        return streams.uniforms(rows, episodes)
    return torch.from_numpy(streams.uniforms_numpy(rows.numpy(), episodes.numpy()))


@pytest.mark.parametrize("path", ["numpy", "torch"])
@pytest.mark.parametrize(("dtype", "bits"), [(torch.float64, 53), (torch.float32, 24)])
@pytest.mark.parametrize("k", [1, 4])
def test_uniforms_match_a_sequential_splitmix64(path, dtype, bits, k):
    seeds = torch.tensor([0, 1, -5, 2**62, 12345])
    episodes = torch.tensor([0, 3, 7, 100, 2**40])
    uniforms = _uniforms(EpisodeStreams(seeds, k, dtype), torch.arange(5), episodes, path)
    assert uniforms.shape == (k, 5) and uniforms.dtype == dtype
    for r in range(5):
        expected = _reference_uniforms(int(seeds[r]), int(episodes[r]), k, bits)
        assert uniforms[:, r].tolist() == expected, f"seed {int(seeds[r])}"


def test_bfloat16_uniforms_keep_its_8_significant_bits():
    uniforms = EpisodeStreams(torch.tensor([3]), 2, torch.bfloat16).uniforms(
        torch.tensor([0]), torch.tensor([5])
    )
    assert uniforms.dtype == torch.bfloat16
    assert uniforms[:, 0].tolist() == _reference_uniforms(3, 5, 2, 8)


@pytest.mark.parametrize("path", ["numpy", "torch"])
def test_a_row_depends_only_on_its_seed_and_episode(path):
    big = EpisodeStreams(torch.arange(8) + 10, 4, torch.float64)
    small = EpisodeStreams(torch.arange(3) + 15, 4, torch.float64)
    episodes = [4, 0, 9]
    got = _uniforms(small, [2, 0, 1], episodes, path)
    want = _uniforms(big, [7, 5, 6], episodes, path)
    assert torch.equal(got, want)


def test_uniforms_are_uniform_and_uncorrelated_across_seeds_and_episodes():
    streams = EpisodeStreams(torch.arange(20000), 2, torch.float32)
    first = streams.uniforms(torch.arange(20000), torch.zeros(20000, dtype=torch.int64))
    second = streams.uniforms(torch.arange(20000), torch.ones(20000, dtype=torch.int64))
    assert first.min() >= 0.0 and first.max() < 1.0
    assert torch.allclose(first.mean(1), torch.full((2,), 0.5), atol=0.01)
    assert torch.allclose(first.std(1), torch.full((2,), 12**-0.5), rtol=0.02)
    pairs = {
        "neighbouring seeds": (first[0, :-1], first[0, 1:]),
        "components": (first[0], first[1]),
        "episodes": (first[0], second[0]),
    }
    for name, (x, y) in pairs.items():
        correlation = torch.corrcoef(torch.stack((x, y)))[0, 1]
        assert abs(float(correlation)) < 0.03, name


def test_rejects_no_uniforms_and_numpy_where_it_cannot_serve():
    with pytest.raises(ValueError, match="num_uniforms must be >= 1"):
        EpisodeStreams(torch.arange(2), 0, torch.float32)
    streams = EpisodeStreams(torch.arange(2), 2, torch.bfloat16)
    assert not streams.supports_numpy
    with pytest.raises(RuntimeError, match="use uniforms"):
        streams.uniforms_numpy(np.arange(2), np.zeros(2, np.int64))
