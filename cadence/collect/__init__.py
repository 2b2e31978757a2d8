"""Collection: `Collector` (in-process unrolls), episode statistics, and rlstructures'
`Batcher`, which runs an `Agent` over environments in worker processes."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "EpisodeStats": "episode_stats",
        "Collector": "unroll",
        "Agent": "cadence.algorithms.agent",
        "replay_agent": "cadence.algorithms.agent",
        "reset_where": "cadence.algorithms.agent",
        "Batcher": "batcher.batcher",
        "BatcherWorkerError": "batcher.errors",
        "make_gym_env": "batcher.gym_env",
        "SlotRandom": "batcher.slot_random",
    },
)

__all__ = [
    "Agent",
    "Batcher",
    "BatcherWorkerError",
    "Collector",
    "EpisodeStats",
    "SlotRandom",
    "make_gym_env",
    "replay_agent",
    "reset_where",
]
