"""Collection: `Collector` (in-process unrolls) and episode statistics."""

from cadence.collect.episode_stats import EpisodeStats
from cadence.collect.unroll import Collector

__all__ = ["Collector", "EpisodeStats"]
