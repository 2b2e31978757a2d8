"""What a pre-emption checkpoint of a full replay buffer costs: time and peak extra memory.

Two buffers, filled past their capacity so that the rings have wrapped and each write
head is in the middle of a chunk:

- ``pendulum``: 1M transitions of SAC on Pendulum-v1 (the rows the trainer stores:
  step type, reward, discount, 3-d observation, previous action, env id, action);
- ``pixels``: 100k transitions of 64x64 RGB uint8 frames (12 KiB per row).

Two ways of checkpointing them, each through the trainer's own `CheckpointManager.save`:

- ``whole``: the buffer's ``state_dict`` (a copy of every ring) saved inside ``state.pt``,
  as every checkpoint did before the buffer moved to chunk files;
- ``chunks``: the trainer's way now: a `ChunkWriter` streamed each completed chunk to the
  run directory while the buffer filled, so the checkpoint hard-links those files and
  writes only the chunks the heads are in the middle of, and ``meta.pt``.

Each measurement runs in a fresh process. Time is the ``save`` call; peak extra memory
is the highest resident set size seen during it (sampled every millisecond) minus the
resident set size just before it.

    python benchmarks/checkpoint_replay.py             # both buffers, both ways
    python benchmarks/checkpoint_replay.py --buffers pendulum
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from cadence.replay.buffer import ReplayBuffer
from cadence.replay.chunk_writer import ChunkWriter
from cadence.trainer.checkpoint import CheckpointManager

BUFFERS = {
    # name: (capacity, rows added, add block, row maker)
    "pendulum": (1_000_000, 1_234_567, 10_000),
    "pixels": (100_000, 123_457, 1_000),
}
METHODS = ("whole", "chunks")


def _rows(kind: str, count: int, start: int) -> dict:
    steps = torch.arange(start, start + count)
    time_step = {
        "step_type": (steps % 200 == 0).long(),
        "reward": torch.randn(count),
        "discount": torch.ones(count),
        "env_id": torch.zeros(count, dtype=torch.int64),
    }
    if kind == "pendulum":
        time_step["observation"] = torch.randn(count, 3)
        time_step["prev_action"] = torch.randn(count, 1)
        action = torch.randn(count, 1)
    else:
        time_step["observation"] = torch.randint(0, 256, (count, 64, 64, 3), dtype=torch.uint8)
        time_step["prev_action"] = torch.randint(0, 4, (count,))
        action = torch.randint(0, 4, (count,))
    rows = {"time_step": time_step, "action": action}
    return {  # [T, B = 1, ...]
        "time_step": {k: v.unsqueeze(1) for k, v in rows["time_step"].items()},
        "action": action.unsqueeze(1),
    }


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _PeakRss:
    """Samples the resident set size every millisecond while it is entered."""

    def __enter__(self) -> _PeakRss:
        self.before = _rss_bytes()
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_bytes())
            time.sleep(0.001)

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())


def measure(kind: str, method: str, work: Path) -> dict:
    """Fills a buffer, then times one checkpoint of it; runs in its own process."""
    capacity, added, block = BUFFERS[kind]
    writer = ChunkWriter(work / "replay") if method == "chunks" else None
    buffer = ReplayBuffer(num_envs=1, capacity=capacity, observer=writer)
    for start in range(0, added, block):
        buffer.add_sequence(_rows(kind, min(block, added - start), start))
    if writer is not None:
        writer.wait()  # in a run, the writer keeps up between checkpoints
    manager = CheckpointManager(work / "checkpoints")
    with _PeakRss() as rss:
        start = time.perf_counter()
        if writer is None:
            manager.save(1, {"scheme": {"replay_buffer": buffer.state_dict()}})
        else:

            def write_files(staging: Path) -> dict[str, str]:
                (staging / "data").mkdir()
                files = writer.write_snapshot(buffer, staging / "data")
                return {f"data/{name}": digest for name, digest in files.items()}

            manager.save(1, {"scheme": {"env_steps": added}}, write_files)
        seconds = time.perf_counter() - start
    written = sum(
        p.stat().st_size
        for p in (work / "checkpoints").rglob("*")
        if p.is_file() and p.stat().st_nlink == 1
    )
    buffer_bytes = sum(
        ring.numel() * ring.element_size() for ring in buffer.storage.fields.values()
    )
    if writer is not None:
        writer.close()
    return {
        "seconds": seconds,
        "extra_mib": (rss.peak - rss.before) / 2**20,
        "written_mib": written / 2**20,
        "buffer_mib": buffer_bytes / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buffers", nargs="+", choices=list(BUFFERS), default=list(BUFFERS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--one", nargs=2, metavar=("BUFFER", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.one:
        with tempfile.TemporaryDirectory() as work:
            print(json.dumps(measure(*args.one, Path(work))))
        return
    print(
        f"{'buffer':<10}{'method':<8}{'buffer MiB':>11}{'time s':>9}{'peak extra MiB':>16}"
        f"{'written MiB':>13}"
    )
    results = {}
    for kind in args.buffers:
        for method in args.methods:
            out = subprocess.run(
                [sys.executable, __file__, "--one", kind, method],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            r = results[kind, method] = json.loads(out.strip().splitlines()[-1])
            print(
                f"{kind:<10}{method:<8}{r['buffer_mib']:>11.0f}{r['seconds']:>9.2f}"
                f"{r['extra_mib']:>16.1f}{r['written_mib']:>13.1f}",
                flush=True,
            )
    for kind in args.buffers:
        if (kind, "whole") in results and (kind, "chunks") in results:
            whole, chunks = results[kind, "whole"], results[kind, "chunks"]
            print(
                f"{kind}: chunks take {whole['seconds'] / chunks['seconds']:.0f}x less time and "
                f"{whole['extra_mib'] / max(chunks['extra_mib'], 1):.0f}x less extra memory "
                "than the whole buffer in state.pt"
            )


if __name__ == "__main__":
    main()
