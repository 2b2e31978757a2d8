"""`MetricsWriter`: ``metrics.jsonl`` and TensorBoard events of one run.

Every log point is one JSON object per line of ``metrics.jsonl`` (``iteration``,
``env_steps``, ``wall_time``, ``train_time`` and every metric) and the same
scalars in ``tb/``, plotted against env steps. On resume both are cut back to
the checkpoint, so the lines logged after it by the interrupted run are not
repeated.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

COUNTERS = ("iteration", "env_steps", "wall_time", "train_time")


class MetricsWriter:
    """Appends log points; ``resume_iteration`` drops those after a checkpoint.

    Args:
        run_dir: the run directory.
        resume_iteration: the iteration of the checkpoint resumed from (0: new run).
        resume_env_steps: that checkpoint's env steps (TensorBoard purges after it).
    """

    def __init__(self, run_dir: Path, resume_iteration: int = 0, resume_env_steps: int = 0):
        self.path = Path(run_dir) / "metrics.jsonl"
        _truncate_after(self.path, resume_iteration)
        # TensorBoard drops what earlier event files hold from this step on: after a
        # checkpoint's step, or everything when a run that died before its first checkpoint
        # starts again (its events would otherwise be shown twice).
        purge_step = resume_env_steps + 1 if resume_iteration else 0
        self._tb = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=purge_step)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, counters: dict[str, float], metrics: dict[str, float]) -> None:
        record = {**counters, **{k: _finite_or_none(v) for k, v in sorted(metrics.items())}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        for key, value in metrics.items():
            if value is not None and math.isfinite(value):
                self._tb.add_scalar(key, value, global_step=int(counters["env_steps"]))

    def write_videos(self, env_steps: int, videos: dict[str, Any]) -> None:
        """Each uint8 ``[T, H, W, 3]`` video as ``videos/<tag>-<env_steps>.mp4`` and as an
        animated image in TensorBoard (encoded here with imageio: TensorBoard's own
        ``add_video`` needs moviepy < 2 and otherwise writes nothing)."""
        from cadence.trainer.video import encode_gif, write_mp4

        directory = self.path.parent / "videos"
        directory.mkdir(exist_ok=True)
        for tag, frames in videos.items():
            frames = frames.cpu().numpy()
            write_mp4(directory / f"{tag.replace('/', '_')}-{env_steps}.mp4", frames)
            self._tb._get_file_writer().add_summary(encode_gif(tag, frames), env_steps)

    def close(self) -> None:
        self._file.close()
        self._tb.close()


class NullMetricsWriter:
    """What ranks other than rank 0 log to: nothing (rank 0 writes the group's metrics)."""

    def write(self, counters: dict[str, float], metrics: dict[str, float]) -> None:
        pass

    def write_videos(self, env_steps: int, videos: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The log points of a run, in order."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a torn last line from a killed run
    return records


def _truncate_after(path: Path, iteration: int) -> None:
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if _iteration(line) <= iteration]
    path.write_text("".join(line + "\n" for line in kept))


def _iteration(line: str) -> int:
    try:
        return int(json.loads(line)["iteration"])
    except (ValueError, KeyError):
        return 1 << 62  # a torn last line from a killed run: drop it


def _finite_or_none(value: float) -> float | None:
    return value if value is None or math.isfinite(value) else None
