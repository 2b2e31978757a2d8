"""The progress display: a bar that fits the terminal, logs above it, plain lines off it."""

from __future__ import annotations

import io
import logging
import re

import pytest
from rich.console import Console

from cadence.trainer.progress import (
    ProgressBar,
    ProgressSnapshot,
    format_plain_line,
    render_line,
)

ESCAPE = re.compile(r"\x1b|\r")
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # cursor moves, line erases


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal, as a handler on a real stderr sees."""

    def isatty(self) -> bool:
        return True


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def terminal_console(width: int) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    console = Console(
        file=out, width=width, force_terminal=True, force_interactive=True, color_system=None
    )
    return console, out


@pytest.mark.parametrize(
    ("total", "done", "whole"),
    [
        (100_000, 48_384, "48,384/100,000"),
        (10_000_000, 4_838_400, "4,838,400/10,000,000"),
    ],
)
def test_the_line_keeps_the_numbers_that_matter_whole_at_80_columns(total, done, whole):
    snapshot = ProgressSnapshot(
        total, done, iteration=378, steps_per_s=12_345.6, episode_return=-1234.5,
        eval_return=200.0, elapsed_s=3725.0, eta_s=45_296.0,
    )  # fmt: skip
    line = render_line(snapshot, 80).plain
    assert len(line) <= 80 and "…" not in line
    for part in (whole, "12,346 steps/s", "return -1234.5", "ETA 12:34:56"):
        assert part in line
    wide = render_line(snapshot, 160).plain
    assert "━" in wide and "iter 378" in wide and "eval 200.0" in wide  # room: all of it


@pytest.mark.parametrize("width", [60, 50])
def test_narrow_terminals_get_compact_numbers_never_cut_ones(width):
    snapshot = ProgressSnapshot(
        10_000_000, 4_838_400, steps_per_s=12_345.6, episode_return=187.3, eta_s=75.0
    )
    line = render_line(snapshot, width).plain
    assert len(line) <= width and "…" not in line
    assert line.split("  ") == ["4.84M/10M", "12.3k/s", "ret 187.3", "ETA 0:01:15"]


@pytest.mark.parametrize("width", [80, 60])
def test_the_drawn_bar_fits_the_console(width):
    console, out = terminal_console(width)
    clock = FakeClock()
    with ProgressBar(10_000_000, "on", console=console, clock=clock) as bar:
        bar.update(4_000_000, 12_345.6, 150.0, iteration=300)
        clock.now += 100.0
        bar.update(4_838_400, 12_345.6, 187.3, iteration=378)
    drawn = [line for line in re.split(r"\r|\n", CSI.sub("\n", out.getvalue())) if line]
    assert drawn and all(len(line) <= width and "…" not in line for line in drawn)
    assert ("4,838,400/10,000,000" if width == 80 else "4.84M/10M") in drawn[-1]
    assert "187.3" in drawn[-1] and "ETA 0:10:15" in drawn[-1]


def test_a_log_record_appears_once_above_the_redrawn_bar():
    terminal = FakeTerminal()
    handler = logging.StreamHandler(terminal)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    console, out = terminal_console(80)
    try:
        with ProgressBar(100_000, "on", console=console) as bar:
            bar.update(48_384, 2345.0, 187.3, iteration=12)
            assert handler not in root.handlers  # a stand-in prints above the bar
            logging.getLogger("cadence.envs.parallel").warning("env worker 3 restarted")
            bar.update(50_000, 2345.0, 190.0, iteration=13)
        assert handler in root.handlers  # the original is back, where it was
        assert not [h for h in root.handlers if type(h).__name__ == "_AboveTheBar"]
        logging.getLogger("cadence.envs.parallel").warning("after the bar")
    finally:
        root.removeHandler(handler)
    shown = out.getvalue()
    message = "WARNING cadence.envs.parallel: env worker 3 restarted"
    assert shown.count(message) == 1 and message not in terminal.getvalue()
    # On its own line (the bar erased first), and the bar is drawn again below it.
    assert re.search(r"\x1b\[2K" + re.escape(message) + "\n", shown)
    assert "env steps" in shown[shown.index(message) :]
    assert "after the bar" not in shown
    assert terminal.getvalue().count("after the bar") == 1  # straight to the terminal again


def test_handlers_that_do_not_write_to_a_terminal_are_left_alone():
    stream = io.StringIO()  # a file, a pipe, pytest's capture
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    console, _ = terminal_console(80)
    try:
        with ProgressBar(100, "on", console=console):
            assert handler in root.handlers
            logging.getLogger("cadence.test").warning("into the file")
    finally:
        root.removeHandler(handler)
    assert stream.getvalue() == "into the file\n"


def test_off_a_terminal_plain_lines_come_every_interval_and_at_the_end():
    clock, stream = FakeClock(), io.StringIO()
    with ProgressBar(
        1000, "auto", interval_s=30.0, stream=stream, clock=clock, heartbeat_s=None
    ) as bar:
        assert bar.style == "lines"  # pytest's stdout is not a terminal
        for iteration in range(1, 11):
            clock.now += 10.0  # one iteration: 100 env steps in 10 s
            bar.update(100 * iteration, 10.0, float(iteration), iteration=iteration)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4  # at 30, 60 and 90 s, then the end
    assert not ESCAPE.search(stream.getvalue())
    assert lines[0] == (
        "progress: iter 3  env steps 300/1,000 (30%)  10 steps/s  return 3.0  "
        "elapsed 0:00:30  ETA 0:01:10"
    )
    assert lines[-1].startswith("progress: iter 10  env steps 1,000/1,000 (100%)")
    assert lines[-1].endswith("ETA 0:00:00")


def test_interval_zero_writes_only_the_final_line():
    clock, stream = FakeClock(), io.StringIO()
    with ProgressBar(1000, "auto", interval_s=0, stream=stream, clock=clock) as bar:
        for iteration in range(1, 6):
            clock.now += 100.0
            bar.update(100 * iteration, 1.0, iteration=iteration)
    assert stream.getvalue().splitlines() == [
        "progress: iter 5  env steps 500/1,000 (50%)  1 steps/s  return -  "
        "elapsed 0:08:20  ETA 0:08:20"
    ]


def test_off_writes_nothing(capsys):
    with ProgressBar(100, "off") as bar:
        bar.update(50, 1000.0, 20.0, iteration=1)
    assert capsys.readouterr().out == ""


def test_a_resumed_run_estimates_its_eta_from_this_session():
    clock, stream = FakeClock(), io.StringIO()
    with ProgressBar(10_000, "auto", interval_s=0, stream=stream, clock=clock) as bar:
        bar.update(6_000, iteration=60)  # restored from the checkpoint
        clock.now += 20.0
        bar.update(7_000, 50.0, iteration=70)
        assert bar.snapshot().eta_s == pytest.approx(60.0)  # 3,000 steps at 50/s


def test_the_plain_line_has_every_field():
    snapshot = ProgressSnapshot(
        100_000, 48_384, iteration=12, steps_per_s=2345.0, episode_return=187.3,
        eval_return=200.0, elapsed_s=26.0, eta_s=16.0,
    )  # fmt: skip
    assert format_plain_line(snapshot) == (
        "progress: iter 12  env steps 48,384/100,000 (48%)  2,345 steps/s  return 187.3  "
        "eval 200.0  elapsed 0:00:26  ETA 0:00:16"
    )
