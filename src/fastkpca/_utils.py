"""Small shared helpers: random generators, row blocks, block sources, input checks."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator

import numpy as np
import scipy.sparse as sp

__all__ = [
    "as_generator",
    "row_blocks",
    "is_block_source",
    "iter_blocks",
    "check_block",
    "check_int",
    "check_float",
    "is_dask_array",
    "DEFAULT_BLOCK_ROWS",
]

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
        return np.random.default_rng(random_state)
    raise ValueError(
        f"random_state must be None, an int or a numpy Generator, got {random_state!r}"
    )


def row_blocks(X, block_rows: int = DEFAULT_BLOCK_ROWS) -> Iterator[tuple[int, object]]:
    """Yield ``(start, X[start:start + block_rows])`` over an array or sparse matrix."""
    n = X.shape[0]
    for start in range(0, n, block_rows):
        yield start, X[start : start + block_rows]


def is_dask_array(X) -> bool:
    """True for a ``dask.array.Array``, told from its type's module so dask is never imported."""
    return type(X).__module__.startswith("dask.") and hasattr(X, "chunks") and hasattr(X, "dask")


def is_block_source(X) -> bool:
    """True for an iterable of row blocks (generator, reader, list of 2-D arrays), not an array."""
    if isinstance(X, np.ndarray) or sp.issparse(X) or hasattr(X, "__array__"):
        return False
    if hasattr(X, "dask") and hasattr(X, "chunks"):
        return False
    if isinstance(X, list | tuple):
        return len(X) > 0 and all(
            (isinstance(b, np.ndarray) and b.ndim == 2) or sp.issparse(b) for b in X
        )
    return isinstance(X, Iterable) and not isinstance(X, str | bytes | dict)


def check_block(block, *, n_features=None, accept_sparse=False, name="X", dtype=None):
    """Validate one row block: 2-D, finite, numeric, the expected width."""
    if sp.issparse(block):
        if not accept_sparse:
            raise ValueError(
                f"{name}: sparse input is not supported by this method; pass a dense array"
            )
        block = block.tocsr()
        data = block.data
    else:
        block = np.asarray(block)
        if block.dtype.kind not in "fiub":
            raise ValueError(f"{name}: expected numeric data, got dtype {block.dtype}")
        if block.dtype.kind != "f":
            block = block.astype(np.float64)
        if block.ndim != 2:
            raise ValueError(f"{name}: expected a 2-D block of rows, got {block.ndim}-D")
        data = block
    if dtype is not None and block.dtype != dtype:
        block = block.astype(dtype)
    if data.size and not np.all(np.isfinite(data)):
        what = "NaN" if np.isnan(data).any() else "infinity"
        raise ValueError(f"Input {name} contains {what}.")
    if n_features is not None and block.shape[1] != n_features:
        raise ValueError(
            f"{name} has {block.shape[1]} features, but the model is expecting "
            f"{n_features} features as input"
        )
    return block


def iter_blocks(source, *, block_rows: int = DEFAULT_BLOCK_ROWS) -> Iterator:
    """Iterate over row blocks of an array or of a block source."""
    if is_block_source(source):
        yield from source
    else:
        for _, block in row_blocks(source, block_rows):
            yield block


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
