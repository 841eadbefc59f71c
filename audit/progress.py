"""Progress of long work, for a person at a terminal and for a plain log (CI).

One :class:`Progress` is where a command's progress goes; it hands out :class:`Meter` objects for
counted work (judgments, bytes, cells, training steps). On a terminal a meter is a live rich bar;
anywhere else (a CI log, a pipe, a file) it writes plain lines to standard error, one at start,
then whenever ``every_s`` seconds have passed or another ``every_fraction`` of the total is done,
and a final line with the elapsed time::

    judging 0/400 judgments (0%)
    judging 120/400 judgments (30%) 3.20 judgments/s ETA 01:27 invalid=2
    judging done: 400/400 judgments in 02:05 (3.20 judgments/s) invalid=5

A disabled Progress (``--quiet``) writes nothing. The clock and the stream are injectable, so the
cadence and the format are testable without sleeping. Rates and ETAs count only the work done in
this run (``done`` at the start, e.g. judgments found in a cache, is not speed).

This module sits below every other floor of the package (tests/test_architecture.py): the
statistics, checks, judges and training report through it without importing the command line.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

Clock = Callable[[], float]


def format_duration(seconds: float) -> str:
    """``mm:ss``, or ``h:mm:ss`` from one hour on."""
    whole = max(int(round(seconds)), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _format_amount(value: float, scaled: bool) -> str:
    if scaled:
        return f"{value:.1f}"
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _format_rate(rate: float) -> str:
    # three significant figures without scientific notation
    if rate >= 100:
        return f"{rate:.0f}"
    if rate >= 10:
        return f"{rate:.1f}"
    return f"{rate:.2f}"


def _format_fields(fields: dict[str, Any]) -> str:
    parts = []
    for key, value in fields.items():
        if value is None or value == "":
            continue
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        parts.append(f"{key}={shown}")
    return " ".join(parts)


class Meter:
    """Counted progress of one piece of work (see the module docstring for the line format).

    ``scale`` divides the counted amount for display, e.g. a meter counting bytes with
    ``scale=1e6, unit="MB"``. Use as a context manager, or call :meth:`close` once at the end.
    """

    def __init__(
        self,
        owner: Progress | None,
        total: float | None,
        label: str,
        unit: str,
        *,
        done: float = 0.0,
        scale: float = 1.0,
    ) -> None:
        self._owner = owner
        self.total = total
        self.label, self.unit, self.scale = label, unit, scale
        self.done = float(done)
        self._initial = float(done)
        self.fields: dict[str, Any] = {}
        self._closed = owner is None
        if owner is None:
            return
        self._started = owner.clock()
        self._last_emit = self._started
        self._last_bucket = self._bucket()
        self._task = owner._bar_add(self) if owner.live else None
        if self._task is None:
            owner.emit(self.status())

    @property
    def active(self) -> bool:
        """False for a meter of a disabled Progress (nothing is ever written)."""
        return self._owner is not None

    def _bucket(self) -> int:
        if not self.total or self._owner is None:
            return 0
        return int(math.floor(self.done / self.total / self._owner.every_fraction + 1e-9))

    def elapsed(self) -> float:
        return 0.0 if self._owner is None else self._owner.clock() - self._started

    def rate(self) -> float | None:
        """Amount per second (in display units) done in this run; None before any time passed."""
        elapsed = self.elapsed()
        if elapsed <= 0 or self.done <= self._initial:
            return None
        return (self.done - self._initial) / self.scale / elapsed

    def eta(self) -> float | None:
        """Seconds left at this run's mean rate; None when unknown."""
        rate = self.rate()
        if rate is None or self.total is None:
            return None
        return max(self.total - self.done, 0.0) / self.scale / rate

    def _amount(self) -> str:
        scaled = self.scale != 1.0
        done = _format_amount(self.done / self.scale, scaled)
        if self.total is None:
            return f"{done} {self.unit}"
        return f"{done}/{_format_amount(self.total / self.scale, scaled)} {self.unit}"

    def status(self) -> str:
        """The plain status line: label, k/N unit (p%), rate, ETA, fields."""
        parts = [self.label, self._amount()]
        if self.total:
            parts.append(f"({100 * min(self.done / self.total, 1.0):.0f}%)")
        rate = self.rate()
        if rate is not None:
            parts.append(f"{_format_rate(rate)} {self.unit}/s")
        eta = self.eta()
        if eta is not None:
            parts.append(f"ETA {format_duration(eta)}")
        elif self.total is None and self._owner is not None:
            parts.append(f"elapsed {format_duration(self.elapsed())}")
        extra = _format_fields(self.fields)
        return " ".join(parts + ([extra] if extra else []))

    def final(self) -> str:
        """The closing line: label, amount, elapsed time and mean rate, fields."""
        line = f"{self.label} done: {self._amount()} in {format_duration(self.elapsed())}"
        rate = self.rate()
        if rate is not None:
            line += f" ({_format_rate(rate)} {self.unit}/s)"
        extra = _format_fields(self.fields)
        return f"{line} {extra}" if extra else line

    def update(self, done: float, *, force: bool = False, **fields: Any) -> None:
        """Set the amount done (absolute) and any fields shown after the rate (e.g. ``loss=0.31``);
        ``force`` writes the line now in plain mode (e.g. at every training log step)."""
        if self._closed or self._owner is None:
            return
        self.done = float(done)
        self.fields.update(fields)
        if self._task is not None:
            self._owner._bar_update(self)
            return
        now, bucket = self._owner.clock(), self._bucket()
        finished = self.total is not None and self.done >= self.total
        due = force or now - self._last_emit >= self._owner.every_s or bucket > self._last_bucket
        if not finished and due:
            self._owner.emit(self.status())
            self._last_emit = now
        self._last_bucket = max(bucket, self._last_bucket)

    def advance(self, amount: float = 1.0, **fields: Any) -> None:
        """Add ``amount`` to the amount done (see :meth:`update`)."""
        self.update(self.done + amount, **fields)

    def close(self, **fields: Any) -> None:
        """Write the final line (plain mode) or stop the bar; later calls do nothing."""
        if self._closed or self._owner is None:
            return
        self._closed = True
        self.fields.update(fields)
        if self._task is not None:
            self._owner._bar_remove(self)
        else:
            self._owner.emit(self.final())

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Progress:
    """Where progress goes: one-line messages (call it) and meters (:meth:`meter`).

    Parameters
    ----------
    enabled
        False writes nothing (``--quiet``).
    stream
        Where lines go; default: ``sys.stderr`` as it is at the time of writing.
    tty
        Live bars (True) or plain lines (False); default: whether the stream is a terminal.
    clock
        Seconds, monotonic (default :func:`time.monotonic`).
    every_s, every_fraction
        Plain-line cadence: a line when this many seconds passed since the last one, or when
        another fraction of the total is done.
    emit
        Send every line to this callable instead of a stream (plain mode), e.g. an older
        ``progress(message)`` callback.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        tty: bool | None = None,
        clock: Clock = time.monotonic,
        every_s: float = 10.0,
        every_fraction: float = 0.1,
        emit: Callable[[str], None] | None = None,
    ) -> None:
        self.enabled = enabled
        self._stream, self._tty, self._emit = stream, tty, emit
        self.clock = clock
        self.every_s, self.every_fraction = every_s, every_fraction
        self._bar: Any = None
        self._bar_meters: dict[int, Meter] = {}

    @classmethod
    def off(cls) -> Progress:
        """A Progress that writes nothing."""
        return cls(enabled=False)

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def live(self) -> bool:
        """Whether meters are live bars (a terminal) rather than plain lines."""
        if not self.enabled or self._emit is not None:
            return False
        if self._tty is not None:
            return self._tty
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def emit(self, line: str) -> None:
        """Write one line (above the bars when bars are live)."""
        if not self.enabled:
            return
        if self._emit is not None:
            self._emit(line)
        elif self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def __call__(self, message: str) -> None:
        """A one-line message about a step (``… message``)."""
        self.emit(message if self._emit is not None else f"… {message}")

    def meter(
        self, total: float | None, label: str, unit: str = "items", *, done: float = 0.0, scale: float = 1.0
    ) -> Meter:
        """A meter for ``total`` units of work (None: unknown total), ``done`` of them already done."""
        return Meter(self if self.enabled else None, total, label, unit, done=done, scale=scale)

    # live bars (rich): one rich Progress shared by the meters open at the same time
    def _bar_add(self, meter: Meter) -> int:
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            console = Console(file=self.stream, force_terminal=True)
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                console=console,
                get_time=self.clock,
            )
            self._bar.start()
        task = self._bar.add_task(meter.label, total=meter.total, completed=meter.done, status="")
        self._bar_meters[task] = meter
        self._bar_update(meter, task)
        return task

    def _bar_update(self, meter: Meter, task: int | None = None) -> None:
        task = meter._task if task is None else task
        status = meter.status().removeprefix(meter.label).strip()
        self._bar.update(task, completed=meter.done, status=status)

    def _bar_remove(self, meter: Meter) -> None:
        self._bar_update(meter)
        if meter._task is not None:
            self._bar_meters.pop(meter._task, None)
        if not self._bar_meters:
            self._bar.stop()
            self._bar = None


ProgressLike = Progress | Callable[[str], None] | bool | None


def as_progress(value: ProgressLike) -> Progress:
    """A :class:`Progress` from what callers pass: a Progress itself; a ``progress(message)``
    callable (every line goes to it); True (standard error, bars on a terminal); False or None
    (silent)."""
    if isinstance(value, Progress):
        return value
    if value is True:
        return Progress()
    if value is None or value is False:
        return Progress.off()
    if callable(value):
        return Progress(emit=value)
    raise TypeError(f"progress must be a Progress, a callable, a bool or None, not {type(value).__name__}")
