"""Training progress: a one-line bar on a terminal, plain periodic lines elsewhere.

On a terminal (``progress_bar='auto'`` with stdout a TTY, or ``'on'``) a rich ``Live``
line shows env steps done/total, steps/s, the latest training return, the latest eval
return and the ETA. The line is laid out for the terminal's current width at every
redraw (rich reads the size at each refresh, so a resized terminal is followed within
half a second): the least useful parts go first (elapsed time, iteration, bar graphic,
eval return, percentage), then the numbers switch to a compact form (``48.4k/100k``),
so none is ever cut to ``4838…``. Log records that a handler would write to the terminal
are printed above the line while it is shown, and the line is redrawn below them.

Off a terminal (``'auto'`` with stdout piped to a file, CI, nohup, the Python API in a
notebook) a plain line with the same fields is written to stdout every ``interval_s``
seconds, also in the middle of a training iteration that takes minutes (a background
thread looks at the clock once a second), and once at the end: no carriage returns, no
escape codes.

Both say what the run is doing: ``initial collection`` (random actions before training
starts), ``collecting``, ``updating k/n``, ``evaluating``, ``checkpointing`` or
``compiling``. The training scheme tells (`collecting`, `updating`: a clock read per
update, nothing in the update itself), the trainer tells the rest. The ETA comes from
the rates measured in this session: seconds per collected env step, per update, and the
rest of an iteration (evaluation, checkpoints); compiling is left out of the rates.
Between two reports it counts down, but never past the part of the work it expected
to take that long: it does not tick up while the step count stands still, nor reach
zero while work is left.

The trainer calls :meth:`ProgressBar.update` once per iteration; it, like the
scheme's reports, only stores numbers. Drawing happens in rich's refresh thread twice a
second, and plain lines in the heartbeat thread (or a report that finds one due).
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal, TextIO

import attrs
from rich.console import Console, ConsoleOptions
from rich.live import Live
from rich.text import Text

from cadence.trainer.pace import Activity, Pace

ProgressMode = Literal["auto", "on", "off"]

_REFRESH_PER_SECOND = 2
_MIN_BAR_WIDTH = 10
_MAX_BAR_WIDTH = 40
# Dropped one after another, left to right, while the line is wider than the terminal.
_DROP_FIRST = ("elapsed", "iteration", "bar", "eval", "percent", "label")
# Then the numbers take their compact form, and only past that do these go too.
_DROP_LAST = ("speed", "eta", "return")


@attrs.frozen
class ProgressSnapshot:
    """The numbers shown at one moment.

    Attributes:
        total_env_steps: the env-step budget of the run.
        env_steps: env steps done (those of earlier sessions of a resumed run included).
        iteration: training iterations done, if known.
        steps_per_s: env steps per second of the latest iteration.
        episode_return: return of the latest finished training episode.
        eval_return: mean return of the latest evaluation.
        elapsed_s: seconds since this session's progress display started.
        eta_s: estimated seconds until the budget is spent.
        status: what the run is doing besides stepping, e.g. compiling (None: nothing).
    """

    total_env_steps: int
    env_steps: int = 0
    iteration: int | None = None
    steps_per_s: float | None = None
    episode_return: float | None = None
    eval_return: float | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None
    status: str | None = None


@attrs.frozen
class _Field:
    full: str
    short: str
    style: str = ""
    separator: str = "  "


def render_line(snapshot: ProgressSnapshot, width: int) -> Text:
    """The bar's line laid out to fit ``width`` columns, dropping and shortening parts.

    Env steps done/total are always kept whole; steps/s, the return and the ETA stay
    whole down to about 60 columns (compact numbers below ~75).
    """
    fields = _fields(snapshot)
    for names, short in _layouts(fields):
        text = _compose(fields, names, short, snapshot, width)
        if text is not None:
            return text
    return _compose(fields, ["steps"], True, snapshot, None)  # narrower than anything: crop


def format_plain_line(snapshot: ProgressSnapshot) -> str:
    """One line of plain text with every field, for logs and pipes."""
    fields = _fields(snapshot)
    parts = [fields[name].full for name in ("iteration", "steps", "speed", "return", "eval")]
    parts[1] = f"env steps {parts[1]} ({fields['percent'].full})"
    parts += [f"elapsed {_clock(snapshot.elapsed_s)}", fields["eta"].full]
    if snapshot.status:
        parts.insert(0, snapshot.status)
    return "progress: " + "  ".join(part for part in parts if part)


def _fields(s: ProgressSnapshot) -> dict[str, _Field]:
    ret = "-" if s.episode_return is None else f"{s.episode_return:.1f}"
    percent = math.floor(100 * min(s.env_steps / s.total_env_steps, 1.0))
    return {
        "iteration": _Field(f"iter {s.iteration}", f"it {s.iteration}", "progress.elapsed")
        if s.iteration is not None
        else _Field("", ""),
        "label": _Field(s.status, s.status, "bold yellow")
        if s.status
        else _Field("env steps", "env steps", "bold"),
        "steps": _Field(
            f"{s.env_steps:,}/{s.total_env_steps:,}",
            f"{_compact(s.env_steps)}/{_compact(s.total_env_steps)}",
            "progress.download",
            " ",
        ),
        "percent": _Field(f"{percent}%", f"{percent}%", "progress.percentage", " "),
        "speed": _Field(
            "- steps/s" if s.steps_per_s is None else f"{s.steps_per_s:,.0f} steps/s",
            "-/s" if s.steps_per_s is None else f"{_compact(s.steps_per_s)}/s",
            "progress.data.speed",
        ),
        "return": _Field(f"return {ret}", f"ret {ret}"),
        "eval": _Field(f"eval {s.eval_return:.1f}", f"eval {s.eval_return:.1f}")
        if s.eval_return is not None
        else _Field("", ""),
        "elapsed": _Field(f"elapsed {_clock(s.elapsed_s)}", "", "progress.elapsed"),
        "eta": _Field(f"ETA {_clock(s.eta_s)}", f"ETA {_clock(s.eta_s)}", "progress.remaining"),
    }


_ORDER = (
    "iteration", "label", "bar", "steps", "percent", "speed", "return", "eval", "elapsed", "eta"
)  # fmt: skip


def _layouts(fields: dict[str, _Field]) -> Iterator[tuple[list[str], bool]]:
    """Ever narrower choices of (fields shown, compact numbers)."""
    names = [name for name in _ORDER if name == "bar" or fields[name].full]
    yield list(names), False
    for name in _DROP_FIRST:
        if name in names:
            names.remove(name)
            yield list(names), False
    yield list(names), True
    for name in _DROP_LAST:
        names.remove(name)
        yield list(names), True


def _compose(
    fields: dict[str, _Field],
    names: list[str],
    short: bool,
    snapshot: ProgressSnapshot,
    width: int | None,
) -> Text | None:
    """The line with these fields, or None if it does not fit ``width`` (None: any)."""
    shown = [fields[name] for name in names if name != "bar"]
    used = sum(len(f.separator) + len(f.short if short else f.full) for f in shown)
    used -= len(shown[0].separator)
    bar_width = 0
    if "bar" in names:
        bar_width = min(_MAX_BAR_WIDTH, (width or 0) - used - 1)
        if bar_width < _MIN_BAR_WIDTH:
            return None
    elif width is not None and used > width:
        return None
    text = Text(no_wrap=True, overflow="crop")
    for name in names:
        if name == "bar":
            text.append(" " if text else "")
            _append_bar(text, snapshot, bar_width)
            continue
        field = fields[name]
        text.append(field.separator if text else "")
        text.append(field.short if short else field.full, field.style)
    return text


def _append_bar(text: Text, snapshot: ProgressSnapshot, width: int) -> None:
    done = round(width * min(snapshot.env_steps / snapshot.total_env_steps, 1.0))
    text.append("━" * done, "bar.complete" if done < width else "bar.finished")
    text.append("━" * (width - done), "bar.back")


def _compact(value: float) -> str:
    """3 significant digits with a k/M/G suffix: 48384 -> '48.4k', 1e7 -> '10M'."""
    for unit in ("", "k", "M"):
        if abs(value) < 999.5:
            return f"{value:.0f}" if not unit else f"{value:.3g}{unit}"
        value /= 1000
    return f"{value:.3g}G"


def _clock(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class ProgressBar:
    """Training progress on the terminal, or as periodic plain lines off it.

    Args:
        total_env_steps: the env-step budget.
        mode: ``'auto'``: a bar when stdout is a terminal, else plain lines; ``'on'``: a
            bar always; ``'off'``: nothing.
        interval_s: seconds between plain lines (0: only the final one).
        console: where the bar draws (a rich console on stdout by default).
        stream: where plain lines go (``sys.stdout`` at the time of writing by default).
        clock: monotonic seconds (a fake one in tests).
        heartbeat_s: how often a background thread looks whether a plain line is due,
            in real seconds (None: no thread; lines then come only when the trainer or
            the scheme reports, as with a fake ``clock``).

    >>> with ProgressBar(1000, "off") as bar:
    ...     bar.update(500, steps_per_s=2000.0, episode_return=21.0, iteration=4)
    """

    def __init__(
        self,
        total_env_steps: int,
        mode: ProgressMode = "auto",
        *,
        interval_s: float = 30.0,
        console: Console | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_s: float | None = 1.0,
    ):
        terminal = console.is_terminal if console is not None else sys.stdout.isatty()
        self.style: Literal["bar", "lines", "off"] = "bar" if mode == "on" or terminal else "lines"
        if mode == "off":
            self.style = "off"
        self._total = total_env_steps
        self._interval_s = interval_s
        self._console = console
        self._stream = stream
        self._clock = clock
        self._heartbeat_s = heartbeat_s
        self._heartbeat: _Heartbeat | None = None
        self._snapshot = ProgressSnapshot(total_env_steps)
        self._live: Live | None = None
        self._log_routes: list[tuple[logging.Logger, logging.Handler, logging.Handler]] = []
        self._start = self._updated_at = 0.0
        self._base: tuple[float, int] | None = None  # (time, env steps) of the first update
        self._rate: float | None = None
        self._pace = Pace(0.0)
        self._status: str | None = None  # shown over the activity (compiling)
        self._next_line = math.inf
        self._lock = threading.Lock()  # one writer of plain lines at a time

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> ProgressBar:
        self._start = self._updated_at = self._clock()
        self._pace = Pace(self._start)
        if self.style == "lines" and self._interval_s > 0:
            self._next_line = self._start + self._interval_s
            if self._heartbeat_s is not None:
                period = min(self._heartbeat_s, self._interval_s / 4)
                self._heartbeat = _Heartbeat(self._tick, period)
                self._heartbeat.start()
        if self.style == "bar":
            console = self._console or Console()
            self._live = Live(
                _LiveLine(self), console=console, refresh_per_second=_REFRESH_PER_SECOND
            )
            self._live.start(refresh=True)  # shown at once, not after the first refresh
            if console.is_interactive:
                self._log_routes = _route_terminal_logs(console)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        self._pace.begin(self._clock(), None)
        self._status = None
        if self._live is not None:
            _restore_logs(self._log_routes)
            self._log_routes = []
            self._live.stop()  # draws the final state once more
            self._live = None
        if self.style == "lines" and self._base is not None:
            self._write_line()  # the final line: the only one at the end (see `_tick`)

    # ------------------------------------------------------------ the hot path
    def update(
        self,
        env_steps: int,
        steps_per_s: float | None = None,
        episode_return: float | None = None,
        eval_return: float | None = None,
        *,
        iteration: int | None = None,
    ) -> None:
        """Records the numbers after an iteration; ``None`` keeps the previous value."""
        if self.style == "off":
            return
        now = self._clock()
        if self._base is None:
            self._base = (now, env_steps)
        elif now > self._base[0]:
            self._rate = (env_steps - self._base[1]) / (now - self._base[0])
        self._updated_at = now
        self._pace.end_iteration(now)
        previous = self._snapshot
        self._snapshot = attrs.evolve(
            previous,
            env_steps=env_steps,
            iteration=previous.iteration if iteration is None else iteration,
            steps_per_s=previous.steps_per_s if steps_per_s is None else steps_per_s,
            episode_return=previous.episode_return if episode_return is None else episode_return,
            eval_return=previous.eval_return if eval_return is None else eval_return,
        )
        self._tick()

    def collecting(self, env_steps: int, initial: bool = False) -> None:
        """An unroll of ``env_steps`` begins (``initial``: random actions before training
        starts); called by the training scheme."""
        if self.style != "off":
            self._pace.collecting(self._clock(), env_steps, initial)

    def updating(self, done: int, total: int | None) -> None:
        """``done`` of this iteration's ``total`` updates (None: not known ahead) are done;
        called by the training scheme before its first update and after each one."""
        if self.style == "off":
            return
        now = self._clock()
        self._pace.updating(now, done, total)
        if now >= self._next_line:
            self._tick()

    def begin(self, activity: Activity | None) -> None:
        """The trainer starts ``activity`` (``'evaluating'``, ``'checkpointing'``; None:
        none until the scheme's next report)."""
        if self.style != "off":
            self._pace.begin(self._clock(), activity)

    def set_status(self, status: str | None) -> None:
        """Shows ``status`` (e.g. ``'compiling'``) over the activity (None: the activity
        again); the time it lasts is left out of the measured rates. Off a terminal a
        status is written as a line at once."""
        if self.style == "off":
            return
        self._pace.pause(self._clock(), status is not None)
        self._status = status
        if status and self.style == "lines":
            with self._lock:
                self._write_line()
        elif self._live is not None:
            self._live.refresh()

    def snapshot(self) -> ProgressSnapshot:
        """The numbers as of now (elapsed and ETA counted to this moment)."""
        now = self._clock()
        snapshot = self._snapshot
        if snapshot.env_steps >= self._total:
            eta = 0.0
        elif self._pace.reported:
            eta = self._pace.eta_s(now, snapshot.env_steps, self._total)
        else:  # a scheme that does not report: the rate of whole iterations
            eta = None
            if self._rate:
                remaining = (self._total - snapshot.env_steps) / self._rate
                eta = max(0.0, remaining - (now - self._updated_at))
        status = self._status or self._pace.describe()
        return attrs.evolve(snapshot, elapsed_s=now - self._start, eta_s=eta, status=status)

    def _tick(self) -> None:
        """Writes a plain line if one is due (from the heartbeat thread, or a report).

        At the budget's end with nothing under way no line is written here: the final
        line follows, and it is written once.
        """
        with self._lock:
            now = self._clock()
            if now < self._next_line:
                return
            self._next_line = now + self._interval_s
            idle = self._status is None and self._pace.describe() is None
            if idle and self._snapshot.env_steps >= self._total:
                return
            self._write_line()

    def _write_line(self) -> None:
        stream = self._stream or sys.stdout
        stream.write(format_plain_line(self.snapshot()) + "\n")
        stream.flush()  # a pipe or nohup.out would otherwise hold it for minutes


class _Heartbeat:
    """A daemon thread calling ``tick`` every ``period_s`` seconds until stopped."""

    def __init__(self, tick: Callable[[], None], period_s: float):
        self._tick = tick
        self._period_s = period_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cadence-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self._period_s):
            try:
                self._tick()
            except (OSError, ValueError):  # stdout closed (``| head``): the main thread says so
                return


class _LiveLine:
    """The renderable rich's refresh thread draws: the line at the console's width."""

    def __init__(self, bar: ProgressBar):
        self._bar = bar

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        yield render_line(self._bar.snapshot(), options.max_width)


class _AboveTheBar(logging.Handler):
    """Prints what ``inner`` would write to the terminal above the live bar instead.

    ``inner`` keeps deciding what is written (its level, filters and formatter); rich
    erases the bar, prints the message on its own line and redraws the bar below.
    """

    def __init__(self, inner: logging.Handler, console: Console):
        super().__init__(inner.level)
        self.inner = inner
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        if not self.inner.filter(record):
            return
        try:
            message = self.inner.format(record)
            self.console.print(message, markup=False, highlight=False, emoji=False, soft_wrap=True)
        except Exception:
            self.handleError(record)


def _writes_to_terminal(handler: logging.Handler) -> bool:
    if not isinstance(handler, logging.StreamHandler) or isinstance(handler, logging.FileHandler):
        return False
    try:
        return bool(handler.stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _route_terminal_logs(
    console: Console,
) -> list[tuple[logging.Logger, logging.Handler, logging.Handler]]:
    """Swaps every handler that writes to a terminal for one that prints above the bar."""
    loggers = [logging.getLogger()] + [
        logger
        for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger) and logger.handlers
    ]
    routes = []
    for logger in loggers:
        for index, handler in enumerate(list(logger.handlers)):
            if _writes_to_terminal(handler):
                wrapper = _AboveTheBar(handler, console)
                logger.handlers[index] = wrapper
                routes.append((logger, handler, wrapper))
    return routes


def _restore_logs(routes: list[tuple[logging.Logger, logging.Handler, logging.Handler]]) -> None:
    """Puts the original handlers back where their stand-ins are (those still there)."""
    for logger, original, wrapper in routes:
        if wrapper in logger.handlers:
            logger.handlers[logger.handlers.index(wrapper)] = original
