"""Small shared helpers: random generators, parameter checks, the default block size."""

from __future__ import annotations

import numbers

import numpy as np

from .execution import require_memory

__all__ = [
    "as_generator",
    "check_int",
    "check_float",
    "require_memory_parts",
    "DEFAULT_BLOCK_ROWS",
    "DEFAULT_TOL",
    "check_tol",
    "check_auto_size",
    "plain",
]

#: Rows per block when a method walks over an in-memory array.
DEFAULT_BLOCK_ROWS = 8192

#: ``n_landmarks="auto"`` / ``n_random_features="auto"`` without ``tol``: grow to a relative rank-k
#: error of at most 1.05 (estimated), 5 % above exact KPCA's optimum.
DEFAULT_TOL = 0.05


def plain(value):
    """``value`` in plain Python values (JSON-ready): dicts with string keys, lists for tuples
    and arrays, Python numbers for numpy scalars; anything else as it is."""
    if isinstance(value, dict):
        return {str(key): plain(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    return value


def as_generator(random_state, *, name: str = "random_state") -> np.random.Generator:
    """Turn a ``random_state`` into a numpy ``Generator``; ValueError naming ``name`` otherwise.

    Accepted: None (fresh entropy), a non-negative int (a seed; any size, as
    ``numpy.random.default_rng`` takes), a ``Generator`` (used as it is), a ``RandomState``
    (used only to draw a seed, so nothing touches numpy's global state), a ``SeedSequence`` or a
    ``BitGenerator``.  Negative ints, bools, floats and other objects are refused: numpy would
    raise its own message (``expected non-negative integer``) or take them silently.
    """
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**32 - 1, dtype=np.uint64))
    if isinstance(random_state, np.random.SeedSequence | np.random.BitGenerator):
        return np.random.default_rng(random_state)
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool | np.bool_):
        if random_state < 0:
            raise ValueError(
                f"{name} must be None, a non-negative int or a numpy Generator, got "
                f"{random_state!r} (a negative seed)"
            )
        return np.random.default_rng(int(random_state))
    raise ValueError(
        f"{name} must be None, a non-negative int or a numpy Generator, got {random_state!r}"
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


def require_memory_parts(parts, *, hint: str = "") -> None:
    """Refuse up front what cannot fit: each ``(nbytes, what)`` part alone (so the message names
    the parameter that decides it), then all of them together
    (:func:`fastkpca.execution.require_memory`, ValueError).

    ``what`` names the parameter and the array, e.g. ``"n_random_features=10**9: the 10**9 x
    10**9 feature covariance"``; the sizes are those of the allocations that follow from the
    parameters alone, before any of them is made.
    """
    parts = [(float(nbytes), what) for nbytes, what in parts if nbytes > 0]
    for nbytes, what in parts:
        require_memory(nbytes, what, hint=hint)
    if len(parts) > 1:
        require_memory(sum(p[0] for p in parts), " and ".join(p[1] for p in parts), hint=hint)


def check_tol(tol, auto: bool) -> float | None:
    """``tol`` validated: a finite number > 0, or None (``DEFAULT_TOL`` when ``auto``)."""
    if tol is None:
        return DEFAULT_TOL if auto else None
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not np.isfinite(float(tol)):
        raise ValueError(f"tol must be a positive number or None, got {tol!r}")
    if tol <= 0:
        raise ValueError(f"tol must be > 0 (the allowed relative excess error), got {tol!r}")
    return float(tol)


def check_auto_size(name: str, value, tol) -> bool:
    """Whether the size parameter ``name`` is chosen by tolerance.

    ``"auto"``, or None together with a ``tol``, means yes; an integer with a ``tol`` is a
    contradiction and raises ValueError.
    """
    check_tol(tol, auto=False)
    if isinstance(value, str):
        if value != "auto":
            raise ValueError(f"{name} must be a positive integer, None or 'auto', got {value!r}")
        return True
    if tol is None:
        return False
    if value is not None:
        raise ValueError(
            f"tol={tol!r} chooses {name} by tolerance; pass {name}='auto' (or None) with it, "
            f"not {name}={value!r}"
        )
    return True
