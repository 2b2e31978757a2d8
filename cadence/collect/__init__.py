"""Collection: `Collector` (in-process unrolls) and episode statistics."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "EpisodeStats": "episode_stats",
        "Collector": "unroll",
    },
)

__all__ = ["Collector", "EpisodeStats"]
