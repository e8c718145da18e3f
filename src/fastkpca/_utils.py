"""Small shared helpers: random generators, parameter checks, the default block size."""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["as_generator", "check_int", "check_float", "DEFAULT_BLOCK_ROWS"]

#: Rows per block when a method walks over an in-memory array.
DEFAULT_BLOCK_ROWS = 8192


def as_generator(random_state) -> np.random.Generator:
    """Turn a ``random_state`` (None, int, Generator or RandomState) into a numpy ``Generator``.

    A RandomState is used only to draw a seed, so nothing touches numpy's global state.
    """
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**32 - 1, dtype=np.uint64))
    if random_state is None or isinstance(random_state, numbers.Integral):
        return np.random.default_rng(None if random_state is None else int(random_state))
    raise ValueError(
        f"random_state must be None, an int or a numpy Generator, got {random_state!r}"
    )


def check_int(name, value, *, low=None, high=None, allow_none=False):
    """An integer parameter in [low, high]; ValueError naming it otherwise."""
    if value is None and allow_none:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        rng = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
        raise ValueError(f"{name}={value} is out of range {rng}")
    return int(value)


def check_float(name, value, *, low=None, high=None, low_open=False, high_open=False):
    """A real parameter in the given (half-)open interval; ValueError naming it otherwise."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    bad_low = low is not None and (value <= low if low_open else value < low)
    bad_high = high is not None and (value >= high if high_open else value > high)
    if bad_low or bad_high:
        lo = ("(" if low_open else "[") + (str(low) if low is not None else "-inf")
        hi = (str(high) if high is not None else "inf") + (")" if high_open else "]")
        raise ValueError(f"{name}={value} is out of range {lo}, {hi}")
    return float(value)
