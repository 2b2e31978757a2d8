"""The progress bar: env steps, steps/s, the latest return and ETA (rich)."""

from __future__ import annotations

import sys
from typing import Literal

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class ProgressBar:
    """A bar over the env-step budget; silent when ``mode`` is off or not a terminal."""

    def __init__(self, total_env_steps: int, mode: Literal["auto", "on", "off"] = "auto"):
        enabled = mode == "on" or (mode == "auto" and sys.stdout.isatty())
        self._progress = (
            Progress(
                TextColumn("[bold]env steps"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[speed]} steps/s"),
                TextColumn("return {task.fields[ret]}"),
                TextColumn("eval {task.fields[eval]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
            )
            if enabled
            else None
        )
        self._task = None
        self._total = total_env_steps

    def __enter__(self) -> ProgressBar:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task(
                "train", total=self._total, speed="-", ret="-", eval="-"
            )
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(
        self,
        env_steps: int,
        steps_per_s: float | None = None,
        episode_return: float | None = None,
        eval_return: float | None = None,
    ) -> None:
        if self._progress is None:
            return
        fields = {}
        if steps_per_s is not None:
            fields["speed"] = f"{steps_per_s:,.0f}"
        if episode_return is not None:
            fields["ret"] = f"{episode_return:.1f}"
        if eval_return is not None:
            fields["eval"] = f"{eval_return:.1f}"
        self._progress.update(self._task, completed=env_steps, **fields)
