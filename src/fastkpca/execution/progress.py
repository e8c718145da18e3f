"""Progress bars over long fits: tqdm, shown only when the running estimator's ``verbose > 0``.

scikit-learn's convention: ``verbose=0`` (the default) is silent.  With ``verbose > 0`` a bar
counts the rows of each pass over the data (:func:`track_rows`, around a source's blocks, with
the total when the source knows it) or the steps of an iteration (:func:`progress_bar`), from
``tqdm.auto`` (a widget in notebooks, text on a terminal), with tqdm's own rule for other
outputs: ``disable=None`` hides the bar when the output is not a terminal, so logs and pipes stay
clean.  The level is held in a :mod:`contextvars` context (:func:`using_verbose`) that the
estimator call enters, like its ``n_jobs`` (:mod:`fastkpca.execution.threads`); work running in
other threads (Dask workers) sees the default, silent.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["check_verbose", "using_verbose", "verbosity", "progress_bar", "track_rows"]

_VERBOSE: ContextVar[int] = ContextVar("fastkpca_verbose", default=0)


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


class _NoBar:
    """What :func:`progress_bar` gives when silent: a bar that does nothing."""

    def update(self, n=1) -> None:
        pass

    def set_postfix_str(self, s="", refresh=True) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def progress_bar(total=None, desc: str | None = None, unit: str = "rows") -> Any:
    """A ``tqdm.auto`` bar when the running call's ``verbose > 0`` (hidden where the output is
    not a terminal: ``disable=None``), else a bar that does nothing.  Use it as a context
    manager, ``update(n)`` as work is done."""
    if verbosity() <= 0:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=None, leave=True)


def track_rows(blocks: Iterable, *, total=None, desc: str | None = None) -> Iterator:
    """Yield the ``(start, block)`` pairs of ``blocks`` while a bar (:func:`progress_bar`)
    counts their rows against ``total`` (None: unknown)."""
    bar = progress_bar(total=total, desc=desc)
    if isinstance(bar, _NoBar):
        yield from blocks
        return
    with bar:
        for start, block in blocks:
            yield start, block
            bar.update(block.shape[0])
