"""The one worker-recovery policy that `ParallelEnvironment` and the `Batcher` share."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from cadence.envs.recovery import RecoveryPolicy


class _Pool:
    """A transport whose replacements die ``deaths`` times before one stays up."""

    def __init__(self, num_workers: int, hung: bool = False):
        self.processes = [SimpleNamespace(pid=100 + w) for w in range(num_workers)]
        self.hung = hung

    def reap(self, worker: int) -> str:
        return "died (exit code 9)"

    def hung_for(self, worker: int) -> float | None:
        return 2.0 if self.hung else None


class _Lost(RuntimeError):
    def __init__(self, message: str, worker: int, hung: bool):
        super().__init__(message)
        self.worker, self.hung = worker, hung


def _policy(pool: _Pool, max_restarts: int = 2) -> RecoveryPolicy:
    return RecoveryPolicy(
        pool,
        owner="Thing",
        worker_kind="thing worker",
        batch_size=4,
        max_restarts=max_restarts,
        window_s=600.0,
        hosted=lambda w: f"hosting slots {2 * w}..{2 * w + 1}",
        cut="its work is cut",
        make_error=_Lost,
        building="while the thing was being built",
        build_timeout="build_timeout_s",
    )


def test_a_lost_worker_is_restarted_within_the_budget_with_one_warning_each(caplog):
    policy = _policy(_Pool(2))
    policy.built = True
    readies = iter([False, True])  # the first replacement dies too: a second restart
    started = []
    with caplog.at_level(logging.WARNING, logger="cadence.envs.recovery"):
        policy.recover(
            1,
            "hung (no answer within 2 s; killed with SIGKILL)",
            started.append,
            lambda w: next(readies),
        )
    assert policy.restarts == [0, 2] and started == [1, 1]
    assert policy.seed_offset(1) == 8 and policy.ended(1) == "died (exit code 9)"
    first, second = (r.getMessage() for r in caplog.records)
    assert first.startswith("thing worker 1 (pid 101, hosting slots 2..3) hung (no answer")
    assert "restarting it (restart 1 of at most 2 per 600 s): its work is cut" in first
    assert first.endswith("seeded seed + env_id + 4") and second.endswith("seed + env_id + 8")
    assert policy.broken is None


def test_past_the_budget_the_owner_raises_its_error_and_is_unusable():
    policy = _policy(_Pool(1), max_restarts=1)
    policy.built = True
    with pytest.raises(_Lost) as error:
        policy.recover(0, "died (exit code 3)", lambda w: None, lambda w: False)
    message = str(error.value)
    assert "died (exit code 9) and its 1 restarts within 600 s are spent" in message
    assert "(max_worker_restarts=1, restart_window_s=600); this Thing is unusable" in message
    assert policy.broken == message and policy.restarts == [1]


def test_restarts_off_and_a_loss_while_building_are_errors_at_once():
    off = _policy(_Pool(1), max_restarts=0)
    off.built = True
    with pytest.raises(_Lost, match=r"restarts are off \(max_worker_restarts=0\)"):
        off.recover(0, "died (exit code 3)", lambda w: None, lambda w: True)
    building = _policy(_Pool(1, hung=True))
    with pytest.raises(_Lost) as error:
        building.recover(0, "hung (...)", lambda w: None, lambda w: True)
    assert error.value.hung and building.restarts == [0]
    assert "while the thing was being built: building it timed out (build_timeout_s" in str(
        error.value
    )


def test_a_replacement_that_cannot_start_leaves_the_owner_unusable():
    policy = _policy(_Pool(1))
    policy.built = True

    def start(worker: int) -> None:
        raise OSError("no more processes")

    with pytest.raises(OSError):
        policy.recover(0, "died (exit code 3)", start, lambda w: True)
    assert policy.broken == (
        "starting a replacement for thing worker 0 failed: OSError('no more processes')"
    )
