"""`Pace`: where a session's time went, and the ETA that the measured rates give.

The progress display (`cadence.trainer.progress`) keeps one: the training scheme says
when it collects and how many updates it did, the trainer when it evaluates and
checkpoints, the compiler when it compiles. Rates, not the pace of whole iterations: a
model-based run's first iterations collect at random without updating, and its first
update compiles, so a rate of env steps per second would be off by several times there.
"""

from __future__ import annotations

import math
from typing import Literal

Activity = Literal["initial collection", "collecting", "updating", "evaluating", "checkpointing"]

_COLLECTING = ("collecting", "initial collection")


class Pace:
    """Where this session's time went, and the ETA the measured rates give.

    Time is charged to the kind of work under way: ``collect`` (measured per env step of
    the unrolls), ``update`` (per update), ``other`` (the rest of an iteration:
    evaluation, checkpoints, logging; per iteration) or ``paused`` (compiling, left out
    of the rates). An iteration costs ``unroll steps x s/step + updates x s/update +
    other``; the ETA is what the iterations left cost, less how far the current one got.
    Only numbers are stored; another thread may read them at any time.
    """

    def __init__(self, now: float):
        self.reported = False  # has a scheme ever said what it does?
        self.activity: str | None = None
        self.paused = False
        self.mark = now  # since when the time is not yet charged
        self.spent = dict.fromkeys(("collect", "update", "other", "paused"), 0.0)
        self.collected = 0  # env steps of the unrolls charged to "collect"
        self.updates = 0  # updates charged to "update"
        self.iterations = 0
        self.update_iterations = 0  # iterations whose updates began
        self.unroll_steps = 0
        self.done = 0  # updates of this iteration so far
        self.total: int | None = None  # updates this iteration announced
        self.this_iteration = dict.fromkeys(("collect", "other"), 0.0)
        self.collected_now = False  # this iteration's unroll is over

    # ------------------------------------------------------------ what happens
    def _kind(self) -> str:
        if self.paused:
            return "paused"
        if self.activity in _COLLECTING:
            return "collect"
        return "update" if self.activity == "updating" else "other"

    def _charge(self, now: float) -> None:
        seconds, self.mark = max(0.0, now - self.mark), now
        kind = self._kind()
        self.spent[kind] += seconds
        if kind in self.this_iteration:
            self.this_iteration[kind] += seconds

    def begin(self, now: float, activity: str | None) -> None:
        """From ``now`` the run does ``activity`` (None: nothing reported)."""
        self._charge(now)
        if self.activity in _COLLECTING and activity != self.activity:
            self.collected += self.unroll_steps
            self.collected_now = True
        self.activity = activity

    def collecting(self, now: float, env_steps: int, initial: bool) -> None:
        """An unroll of ``env_steps`` begins (``initial``: random actions)."""
        self.reported = True
        self.unroll_steps = env_steps
        self.begin(now, "initial collection" if initial else "collecting")

    def updating(self, now: float, done: int, total: int | None) -> None:
        """``done`` of this iteration's ``total`` updates are done (0: they begin)."""
        if self.activity != "updating":
            self.begin(now, "updating")
            self.done, self.total = 0, total
            self.update_iterations += 1
        else:
            self._charge(now)
        self.updates += done - self.done
        self.done = done

    def pause(self, now: float, paused: bool) -> None:
        """From ``now`` the time is (not) left out of the rates: compiling."""
        self._charge(now)
        self.paused = paused

    def end_iteration(self, now: float) -> None:
        """An iteration ended (its counters were shown)."""
        self.begin(now, None)
        self.iterations += self.reported
        self.done, self.collected_now = 0, False
        self.this_iteration = dict.fromkeys(self.this_iteration, 0.0)

    def describe(self) -> str | None:
        """What the run is doing, for the line (``updating 3/100``), or None."""
        if self.activity != "updating":
            return self.activity
        return f"updating {self.done}/{self.total}" if self.total else f"updating {self.done}"

    # ------------------------------------------------------------ the estimate
    def eta_s(self, now: float, env_steps: int, total_env_steps: int) -> float | None:
        """Seconds until ``total_env_steps`` (None: a rate is not measured yet; before the
        first update, the iterations of initial random collection would say minutes for
        hours)."""
        if not self.collected or not self.updates:
            return None  # the first unroll, or the first update, is still running
        update_s = self.spent["update"] / self.updates
        cost = {
            "collect": self.unroll_steps * self.spent["collect"] / self.collected,
            "update": self._updates_per_iteration() * update_s,
            "other": self.spent["other"] / self.iterations if self.iterations else 0.0,
        }
        iterations_left = math.ceil((total_env_steps - env_steps) / self.unroll_steps)
        return max(0.0, iterations_left * sum(cost.values()) - self._got(now, cost, update_s))

    def _updates_per_iteration(self) -> float:
        """The mean over the iterations whose updates are over, or while the first one's
        run, its announced total (passes stopped early make fewer)."""
        running = self.activity == "updating"
        finished = self.update_iterations - running
        if finished:
            return (self.updates - self.done * running) / finished
        return float(self.total or self.done) if running else 0.0

    def _got(self, now: float, cost: dict[str, float], update_s: float) -> float:
        """How far the current iteration got, in seconds of ``cost``: the updates done at
        the measured rate, the time spent on the rest, and the time since the latest
        report, each counted up to the cost of its part."""
        live = max(0.0, now - self.mark)
        kind = self._kind()
        if self.collected_now:
            collect = cost["collect"]
        else:
            collect = self.this_iteration["collect"] + (live if kind == "collect" else 0.0)
        update = self.done * update_s + (min(live, update_s) if kind == "update" else 0.0)
        other = self.this_iteration["other"] + (live if kind == "other" else 0.0)
        return (
            min(collect, cost["collect"]) + min(update, cost["update"]) + min(other, cost["other"])
        )
