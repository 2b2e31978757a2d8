"""rlstructures' way of writing RL: agents with explicit state and per-slot parameters, and
the `Batcher`, which runs them over environments in worker processes."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Agent": "agent",
        "replay_agent": "agent",
        "reset_where": "agent",
        "Batcher": "batcher",
        "BatcherWorkerError": "batcher",
        "make_gym_env": "gym_env",
        "SlotRandom": "slot_random",
    },
)

__all__ = [
    "Agent",
    "Batcher",
    "BatcherWorkerError",
    "SlotRandom",
    "make_gym_env",
    "replay_agent",
    "reset_where",
]
