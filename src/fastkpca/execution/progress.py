"""Progress of long work, for the library (``verbose > 0``) and the command line alike.

:class:`Progress` counts the work of one pass against a total when there is one: a tqdm bar on
a terminal (``tqdm.auto``: a widget in notebooks); elsewhere a plain line every
:data:`LOG_INTERVAL` seconds (done, rate, elapsed, and with a total the fraction and time left)
and a last line; nothing where there is no output (``sys.stderr`` None or closed).
:func:`heartbeat` covers a step with no count (a line with the time elapsed unless progress was
written meanwhile); :func:`note` writes one line under the same rules.  ``verbose=0`` (the
default) is silent; the level is a :mod:`contextvars` context (:func:`using_verbose`) the
estimator call enters, so other threads (Dask workers) are silent.  The command line shows
progress unless ``--quiet``.
"""

from __future__ import annotations

import numbers
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = [
    "LOG_INTERVAL",
    "Progress",
    "check_verbose",
    "heartbeat",
    "note",
    "progress_bar",
    "track_rows",
    "using_verbose",
    "verbosity",
]

#: Seconds between two progress lines where the output is not a terminal.
LOG_INTERVAL = 5.0

_VERBOSE: ContextVar[int] = ContextVar("fastkpca_verbose", default=0)

# When the last progress line (or bar update) was written: heartbeats stay quiet after it.
_last_output = [0.0]

# The heartbeats running, outermost first: only the innermost writes (it says the most).
_heartbeats: list = []


def check_verbose(verbose, name: str = "verbose") -> int:
    """``verbose`` as scikit-learn takes it: an int >= 0 or a bool; ValueError naming it
    otherwise."""
    if isinstance(verbose, bool):
        return int(verbose)
    if not isinstance(verbose, numbers.Integral) or verbose < 0:
        raise ValueError(f"{name} must be an integer >= 0 (0: silent), got {verbose!r}")
    return int(verbose)


@contextmanager
def using_verbose(verbose) -> Iterator[None]:
    """Context in which :func:`verbosity` gives ``verbose`` (checked on entry)."""
    token = _VERBOSE.set(check_verbose(verbose))
    try:
        yield
    finally:
        _VERBOSE.reset(token)


def verbosity() -> int:
    """The verbosity of the running estimator call (0 outside one)."""
    return _VERBOSE.get()


def _stream(file=None):
    """Where progress goes: ``file``, else the current ``sys.stderr``; None when that cannot be
    written (None, or closed)."""
    stream = sys.stderr if file is None else file
    if stream is None or getattr(stream, "closed", False) or not hasattr(stream, "write"):
        return None
    return stream


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _in_notebook() -> bool:
    return "ipykernel" in sys.modules


def _write_line(stream, text: str) -> bool:
    """Write one line; False when the stream turned out unwritable (then stay silent)."""
    try:
        stream.write(text + "\n")
        stream.flush()
    except (ValueError, OSError, AttributeError):
        return False
    _last_output[0] = time.monotonic()
    return True


def _count(n: float) -> str:
    return f"{int(n):,}"


def _amount(n: float, unit: str) -> str:
    if unit == "B":
        for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if n >= scale:
                return f"{n / scale:.1f} {name}"
        return f"{int(n)} B"
    return f"{_count(n)} {unit}"


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def note(message: str, *, file=None, enabled: bool | None = None) -> None:
    """Write ``message`` as one line of progress (stderr by default), when the running call is
    verbose (``enabled=None``) or ``enabled``; nothing where the output cannot be written."""
    if not (verbosity() > 0 if enabled is None else enabled):
        return
    stream = _stream(file)
    if stream is not None:
        _write_line(stream, message)


class Progress:
    """The progress of one pass over ``total`` units of work (None: unknown).

    ``update(n)`` adds ``n`` units done (``update(n, rows=...)`` also shows rows read, for a
    total in bytes).  As a context manager, leaving it writes the last line (or closes the bar).

    Parameters
    ----------
    desc : str
        What is being done, e.g. ``"reading data.csv"``.
    total : int or None
        Units of the whole pass, when known.
    unit : str
        ``"rows"``, ``"B"`` (bytes), ``"tiles"``, ...
    enabled : bool or None
        None: shown when the running estimator call is verbose (:func:`verbosity`); True or
        False: as said (the command line).
    file : text stream or None
        Where to write; None is ``sys.stderr`` at the time.
    interval : float or None
        Seconds between lines where the output is not a terminal (None: :data:`LOG_INTERVAL`).
    """

    def __init__(
        self,
        desc: str,
        *,
        total=None,
        unit: str = "rows",
        enabled: bool | None = None,
        file=None,
        interval: float | None = None,
    ):
        self.desc, self.unit = desc, unit
        self.interval = float(LOG_INTERVAL if interval is None else interval)
        self.total = None if total is None else int(total)
        self.n = 0
        self.rows: int | None = None
        self.started = time.monotonic()
        self._next_line = self.started + self.interval
        self._bar = None
        self._stream = None
        self._closed = False
        self._lines = 0
        if not (verbosity() > 0 if enabled is None else enabled):
            return
        stream = _stream(file)
        if stream is None:
            return
        if _is_terminal(stream) or (_in_notebook() and stream is sys.stderr):
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(
                    total=self.total,
                    desc=desc,
                    unit=unit,
                    unit_scale=True,
                    unit_divisor=1024 if unit == "B" else 1000,
                    file=stream,
                    leave=True,
                )
            except Exception:  # no tqdm, or a stream tqdm cannot use: plain lines instead
                self._bar = None
        if self._bar is None:
            self._stream = stream

    @property
    def shown(self) -> bool:
        """Whether anything is being written."""
        return self._bar is not None or self._stream is not None

    def update(self, n=1, *, rows: int | None = None) -> None:
        self.n += n
        if rows is not None:
            self.rows = int(rows)
        if self._bar is not None:
            try:
                self._bar.update(n)
                if rows is not None:
                    self._bar.set_postfix_str(f"{_count(rows)} rows", refresh=False)
            except Exception:  # the output went away: stay silent
                self._bar = None
            _last_output[0] = time.monotonic()
        elif self._stream is not None:
            now = time.monotonic()
            if now >= self._next_line:
                self._next_line = now + self.interval
                self._line(now)

    # tqdm's names, for code written against a bar
    def set_postfix_str(self, s="", refresh=True) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(s, refresh=refresh)

    def _line(self, now: float, done: bool = False, stopped: bool = False) -> None:
        elapsed = now - self.started
        rate = self.n / elapsed if elapsed > 0 else 0.0
        if self.total:
            so_far = _count(self.n) if self.unit != "B" else _amount(self.n, self.unit)
            percent = 100 * self.n / self.total
            text = f"{so_far} of {_amount(self.total, self.unit)} ({percent:.0f}%)"
        else:
            text = _amount(self.n, self.unit)
        if self.rows is not None and self.unit != "rows":
            text = f"{_count(self.rows)} rows, {text}"
        rows_rate = self.rows / elapsed if self.rows is not None and elapsed > 0 else None
        speed = f"{_count(rows_rate)} rows/s" if rows_rate is not None else None
        if speed is None or self.unit != "rows":
            unit_rate = f"{_amount(rate, self.unit)}/s"
            speed = unit_rate if speed is None else f"{speed}, {unit_rate}"
        if done:
            end = "stopped after" if stopped else "done,"
            line = f"{self.desc}: {end} {text} in {_duration(elapsed)} ({speed})"
        else:
            line = f"{self.desc}: {text}, {speed}, {_duration(elapsed)} elapsed"
            if self.total and 0 < self.n < self.total and rate > 0:
                line += f", about {_duration((self.total - self.n) / rate)} left"
        self._lines += 1
        if not _write_line(self._stream, line):
            self._stream = None

    def close(self, *, stopped: bool = False) -> None:
        """End the pass: the last line says it was done, or ``stopped`` before its end."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            try:
                self._bar.close()
            except Exception:
                pass
        elif self._stream is not None:
            now = time.monotonic()
            if self._lines or now - self.started >= self.interval:
                self._line(
                    now, done=True, stopped=stopped
                )  # a pass shorter than a line's interval: no line

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(stopped=exc_type is not None)


@contextmanager
def heartbeat(
    desc: str, *, enabled: bool | None = None, file=None, interval: float | None = None
) -> Iterator[None]:
    """While the block runs, a line ``"{desc}: N s elapsed"`` every ``interval`` seconds in
    which no other progress line was written (a thread; only where the output is not a
    terminal, as :class:`Progress`'s lines).  Of nested heartbeats only the innermost writes."""
    stream = _stream(file)
    if not (verbosity() > 0 if enabled is None else enabled) or stream is None:
        yield
        return
    if _is_terminal(stream) or (_in_notebook() and stream is sys.stderr):
        yield
        return
    interval = float(LOG_INTERVAL if interval is None else interval)
    stop = threading.Event()
    started = time.monotonic()

    def beat():
        while not stop.wait(min(1.0, interval)):
            now = time.monotonic()
            if _heartbeats[-1:] != [token]:
                continue  # an inner heartbeat speaks
            if now - _last_output[0] >= interval:
                if not _write_line(stream, f"{desc}: {_duration(now - started)} elapsed"):
                    return

    token = object()
    if not _heartbeats:  # silence is counted from the outermost heartbeat's start
        _last_output[0] = max(_last_output[0], started)
    _heartbeats.append(token)
    thread = threading.Thread(target=beat, name="fastkpca-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        _heartbeats.remove(token)


def progress_bar(total=None, desc: str | None = None, unit: str = "rows") -> Any:
    """The running call's :class:`Progress` (silent unless ``verbose > 0``): a bar on a terminal,
    lines elsewhere.  Use it as a context manager, ``update(n)`` as work is done."""
    return Progress(desc or "progress", total=total, unit=unit)


def track_rows(blocks: Iterable, *, total=None, desc: str | None = None) -> Iterator:
    """Yield the ``(start, block)`` pairs of ``blocks`` while a :class:`Progress` counts their
    rows against ``total`` (None: unknown), when the running call is verbose."""
    if verbosity() <= 0:
        yield from blocks
        return
    with Progress(desc or "rows", total=total) as progress:
        for start, block in blocks:
            yield start, block
            progress.update(block.shape[0])
