"""Progress inside long iterations: what the run is doing, a line at least every interval
(also while one update takes minutes), one final line, and an ETA from measured rates."""

from __future__ import annotations

import io
import time

import pytest

from cadence.algorithms.algorithm import Algorithm
from cadence.config import load_config
from cadence.trainer.progress import ProgressBar
from cadence.trainer.run import train


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class StampedStream(io.StringIO):
    """Remembers the fake time of every line written."""

    def __init__(self, clock: FakeClock):
        super().__init__()
        self.clock = clock
        self.times: list[float] = []

    def write(self, text: str) -> int:
        self.times += [self.clock.now] * text.count("\n")
        return super().write(text)


def lines_bar(clock: FakeClock, total: int, interval_s: float, stream: io.StringIO) -> ProgressBar:
    return ProgressBar(
        total, "auto", interval_s=interval_s, stream=stream, clock=clock, heartbeat_s=None
    )


def dreamer_like_iteration(bar: ProgressBar, clock: FakeClock, updates: int, update_s: float):
    """Collect 1,000 env steps in 10 s, then ``updates`` updates of ``update_s`` each."""
    bar.collecting(1000)
    clock.now += 10.0
    bar.updating(0, updates)
    for done in range(1, updates + 1):
        clock.now += update_s
        bar.updating(done, updates)


def test_a_line_comes_every_interval_inside_a_long_update_loop():
    clock = FakeClock()
    stream = StampedStream(clock)
    with lines_bar(clock, 2000, 10.0, stream) as bar:
        bar.collecting(1000, initial=True)
        clock.now += 5.0
        bar.update(1000, 200.0, iteration=1)
        dreamer_like_iteration(bar, clock, updates=100, update_s=4.0)  # 410 s, one iteration
        bar.update(2000, 2.4, iteration=2)
    lines = stream.getvalue().splitlines()
    updating = [line for line in lines if line.startswith("progress: updating ")]
    # From the first update on, a line at most one update after it is due (the
    # heartbeat thread, off here, writes on time also where nothing reports).
    times = stream.times[lines.index(updating[0]) :]
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) <= 10.0 + 4.0
    assert len(updating) >= 400 // 14  # 400 s of updates, a line every 10 to 14 s
    assert "  iter 1  env steps 1,000/2,000 (50%)" in updating[0]
    done = [int(line.split()[2].split("/")[0]) for line in updating]
    assert done == sorted(done) and done[-1] >= 97
    assert sum("2,000/2,000" in line for line in lines) == 1  # the final line, once


def test_the_heartbeat_writes_while_the_training_thread_reports_nothing():
    stream = io.StringIO()
    with ProgressBar(1000, "auto", interval_s=0.2, stream=stream, heartbeat_s=0.02) as bar:
        bar.collecting(100)
        bar.updating(0, 1)
        time.sleep(1.2)  # one update that takes six intervals
        during = stream.getvalue().splitlines()
    assert len(during) >= 3
    assert all(line.startswith("progress: updating 0/1  env steps 0/1,000") for line in during)


def test_the_final_line_is_written_once():
    clock = FakeClock()
    stream = StampedStream(clock)
    with lines_bar(clock, 300, 10.0, stream) as bar:
        for iteration in range(1, 4):
            clock.now += 10.0  # each update() finds a line due, the last one too
            bar.update(100 * iteration, 10.0, iteration=iteration)
    lines = stream.getvalue().splitlines()
    assert [line.split("  ")[1] for line in lines] == [
        "env steps 100/300 (33%)",
        "env steps 200/300 (66%)",
        "env steps 300/300 (100%)",
    ]


def test_the_line_says_what_the_run_is_doing():
    clock, stream = FakeClock(), io.StringIO()
    with lines_bar(clock, 1000, 0, stream) as bar:
        bar.collecting(100, initial=True)
        assert bar.snapshot().status == "initial collection"
        bar.collecting(100)
        assert bar.snapshot().status == "collecting"
        bar.updating(0, 50)
        bar.updating(3, 50)
        assert bar.snapshot().status == "updating 3/50"
        bar.set_status("compiling")
        assert bar.snapshot().status == "compiling"
        bar.set_status(None)
        bar.updating(4, 50)
        assert bar.snapshot().status == "updating 4/50"
        bar.begin("evaluating")
        assert bar.snapshot().status == "evaluating"
        bar.update(100, iteration=1)
        assert bar.snapshot().status is None
        bar.begin("checkpointing")
        assert bar.snapshot().status == "checkpointing"
        bar.collecting(100)
        bar.updating(0, None)  # passes over the whole replay buffer: no total ahead
        bar.updating(4, None)
        assert bar.snapshot().status == "updating 4"
        bar.update(200, iteration=2)
    assert stream.getvalue().startswith("progress: compiling  env steps 0/1,000")  # at once
    assert stream.getvalue().splitlines()[-1].startswith("progress: iter 2  env steps 200/1,000")


def test_the_eta_comes_from_the_rates_of_collection_and_of_updates():
    clock = FakeClock()
    with lines_bar(clock, 5000, 0, io.StringIO()) as bar:
        bar.collecting(1000, initial=True)  # random actions: fast, and no update
        clock.now += 10.0
        bar.update(1000, 100.0, iteration=1)
        assert bar.snapshot().eta_s is None  # the pace of updates is not known yet
        bar.collecting(1000)
        clock.now += 10.0
        bar.updating(0, 100)
        for done in range(1, 51):
            clock.now += 1.0
            bar.updating(done, 100)
        # 50 updates of this iteration, then 3 iterations of 10 s collecting + 100 updates.
        assert bar.snapshot().eta_s == pytest.approx(50 + 3 * 110)
        clock.now += 0.5  # between two reports it counts down...
        assert bar.snapshot().eta_s == pytest.approx(50 + 3 * 110 - 0.5)
        clock.now += 30.0  # ...but no further than the update under way should take
        assert bar.snapshot().eta_s == pytest.approx(49 + 3 * 110)
        bar.updating(51, 100)  # that update took 30.5 s: the rate of updates changes
        update_s = 80.5 / 51
        assert bar.snapshot().eta_s == pytest.approx(49 * update_s + 3 * (10 + 100 * update_s))


def test_the_eta_does_not_grow_while_nothing_is_reported():
    clock = FakeClock()
    with lines_bar(clock, 10_000, 0, io.StringIO()) as bar:
        dreamer_like_iteration(bar, clock, updates=10, update_s=2.0)
        bar.begin("evaluating")
        clock.now += 5.0
        bar.update(1000, 28.0, iteration=1)
        bar.collecting(1000)
        etas = []
        for _ in range(30):  # a long unroll, no report
            etas.append(bar.snapshot().eta_s)
            clock.now += 1.0
        assert all(b <= a for a, b in zip(etas, etas[1:], strict=False))
        # 9 iterations of 10 s + 10 x 2 s + 5 s, less the 10 s the unroll should take.
        assert etas[0] == pytest.approx(9 * 35) and etas[-1] == pytest.approx(9 * 35 - 10)


def test_compiling_is_left_out_of_the_update_rate():
    clock = FakeClock()
    with lines_bar(clock, 2000, 0, io.StringIO()) as bar:
        bar.collecting(1000)
        clock.now += 10.0
        bar.updating(0, 10)
        bar.set_status("compiling")
        clock.now += 60.0
        bar.set_status(None)
        for done in range(1, 6):
            clock.now += 1.0
            bar.updating(done, 10)
        assert bar.snapshot().eta_s == pytest.approx(5 + 10 + 10)


def test_a_slow_training_iteration_prints_what_it_is_doing(tmp_path, capsys, monkeypatch):
    """Through the trainer: the scheme's updates and the evaluation are reported."""
    update_rows = Algorithm.update_rows

    def slow_update_rows(self, batch, indices):
        time.sleep(0.05)
        return update_rows(self, batch, indices)

    monkeypatch.setattr(Algorithm, "update_rows", slow_update_rows)
    config = load_config(
        "ppo_cartpole",
        [
            "env.num_envs=2",
            "trainer.unroll_length=16",
            "trainer.num_env_steps=64",  # 2 iterations of 16 updates (0.8 s each at least)
            "algorithm.mini_batch_size=8",
            "algorithm.compile=off",  # eager: the slowed update_rows runs
            "trainer.progress_bar=auto",  # pytest's stdout is not a terminal
            "trainer.progress_interval_s=0.2",
            "trainer.num_eval_episodes=1",
            "env.max_episode_steps=20",
        ],
        root_dir=tmp_path / "run",
    )
    assert train(config) == "complete"
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("progress: updating ") and "/16  " in line for line in lines)
    final = [line for line in lines if line.startswith("progress: iter 2  env steps 64/64")]
    assert final == lines[-1:]  # once (a "checkpointing" line may come before it)
