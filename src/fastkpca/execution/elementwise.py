"""Row and element-wise primitives of the kernels' math: one signature on every placement.

The steps of :mod:`fastkpca.kernels` whose fast or only form differs by library, for numpy
(and where said scipy.sparse) rows, PyTorch / CuPy and any array-API array: in place where the
library allows it (:func:`exp_`, :func:`tanh_`, :func:`clip_`, :func:`fill_diagonal_`);
products and norms of rows that may be sparse (:func:`matmul`, :func:`row_sq_norms`,
:func:`shift_rows`, :func:`with_columns`, :func:`l1_distances`, ...); host-only special
functions (:func:`bessel_kv`: a kernel that needs one has no namespace math, and device rows'
blocks are computed on host copies, :mod:`fastkpca.execution.kernel_ops`).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from scipy import special

from .arrays import get_namespace, placement_of
from .threads import map_row_chunks

__all__ = [
    "float_name",
    "as_float64",
    "astype_name",
    "row_center",
    "shift_rows",
    "row_sq_norms",
    "row_l1_norms",
    "row_max_abs",
    "divide_rows",
    "with_columns",
    "transpose",
    "matmul",
    "max_finite",
    "check_finite",
    "nonfinite",
    "store",
    "exp_",
    "tanh_",
    "clip_",
    "fill_diagonal_",
    "put_",
    "l1_distances",
    "bessel_kv",
    "ones_rows",
]


# --- dtypes and namespaces ------------------------------------------------------------------------
def float_name(dtype) -> str:
    """``"float32"`` for a float32 dtype of any library (numpy, torch, CuPy, array API) or its
    name, else ``"float64"`` (integers and float64 compute in float64)."""
    if isinstance(dtype, np.dtype):  # the common case, without a name lookup
        return "float32" if dtype == np.float32 else "float64"
    try:
        name = np.dtype(dtype).name
    except TypeError:  # a torch or array-API dtype (``torch.float32``)
        name = str(dtype).rsplit(".", 1)[-1]
    return "float32" if name == "float32" else "float64"


def _is_numpy(a) -> bool:
    return isinstance(a, np.ndarray)


def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")


def astype_name(a, name: str):
    """``a`` in the float dtype ``name`` (``"float32"`` / ``"float64"``), itself when it is."""
    if _is_numpy(a):
        return a if a.dtype == name else a.astype(name)
    if str(a.dtype).rsplit(".", 1)[-1] == name:
        return a
    if sp.issparse(a):
        return a.astype(name)
    xp = get_namespace(a)
    return xp.astype(a, getattr(xp, name))


def as_float64(a):
    """``a`` in float64 (scipy.sparse stays sparse; itself when already float64)."""
    return astype_name(a, "float64")


# --- rows -----------------------------------------------------------------------------------------
def row_center(Y):
    """The mean of the rows of dense Y (float64), or None for scipy.sparse rows, which are not
    centered: centering would make them dense (nor are no rows: they have no mean)."""
    if Y.shape[0] == 0 or sp.issparse(Y):
        return None
    return get_namespace(Y).mean(Y, axis=0)


def shift_rows(X, center):
    """``(X - center, True)``, or ``(X, False)`` for sparse rows or no center."""
    if center is None or (not _is_numpy(X) and sp.issparse(X)):
        return X, False
    return X - center, True


def row_sq_norms(X):
    """Squared Euclidean norms of the rows of X (float64 X; dense or sparse), float64."""
    if _is_numpy(X):
        return np.einsum("ij,ij->i", X, X)
    if sp.issparse(X):
        X = X.tocsr()
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    return get_namespace(X).sum(X * X, axis=1)


def row_l1_norms(X):
    """L1 norms of the rows of X (dense or sparse)."""
    if sp.issparse(X):
        return np.asarray(abs(X).sum(axis=1), dtype=np.float64).ravel()
    xp = get_namespace(X)
    return xp.sum(xp.abs(X), axis=1)


def row_max_abs(X):
    """The largest absolute entry of each row (0 for an empty or all-zero row), dense or sparse."""
    if sp.issparse(X):
        if X.shape[1] == 0:
            return np.zeros(X.shape[0])
        return np.asarray(abs(X).max(axis=1).todense(), dtype=np.float64).ravel()
    xp = get_namespace(X)
    if X.shape[1] == 0:
        return xp.zeros((X.shape[0],), dtype=X.dtype, device=placement_of(X).device)
    return xp.max(xp.abs(X), axis=1)


def divide_rows(X, divisors):
    """Row i of X divided by ``divisors[i]`` (a new array; sparse rows stay sparse)."""
    if sp.issparse(X):
        X = X.tocsr(copy=True)
        X.data /= np.repeat(np.asarray(divisors, dtype=X.dtype), np.diff(X.indptr))
        return X
    return X / divisors[:, None]


def with_columns(X, *columns, dtype: str | None = None):
    """``[X | c1 | c2 ...]``: the rows of X with more columns appended, each a vector of one
    value per row or a number (a constant column), in the float dtype ``dtype`` (default X's;
    sparse X: a CSR matrix).  numpy fills one new array, casting as it copies."""
    n, d = X.shape
    dtype = dtype or float_name(X.dtype)
    if _is_numpy(X):
        out = np.empty((n, d + len(columns)), dtype=dtype)
        out[:, :d] = X
        for j, c in enumerate(columns):
            out[:, d + j] = c
        return out
    if sp.issparse(X):
        parts = [np.full((n, 1), c) if np.isscalar(c) else np.asarray(c)[:, None] for c in columns]
        return sp.hstack([X, *(sp.csr_matrix(p) for p in parts)], format="csr", dtype=dtype)
    placement = placement_of(X)
    xp = placement.xp
    target = getattr(xp, dtype)
    parts = [
        xp.full((n, 1), float(c), dtype=target, device=placement.device)
        if isinstance(c, int | float)
        else xp.reshape(xp.astype(c, target), (n, 1))
        for c in columns
    ]
    return xp.concat([xp.astype(X, target), *parts], axis=1)


def transpose(A, *, copy: bool = False):
    """The transpose of a matrix (dense or sparse): a view, or with ``copy`` a new array in row
    order (numpy, torch), the layout in which a GEMM reads a right factor fastest."""
    if sp.issparse(A):
        return A.T.tocsr() if copy else A.T
    if copy and _is_numpy(A):
        return np.ascontiguousarray(A.T)
    At = get_namespace(A).permute_dims(A, (1, 0))
    if copy and _is_torch(At):
        return At.contiguous()
    return At


def matmul(A, B, out=None):
    """``A @ B`` as a dense array (A or B may be scipy.sparse); written into ``out`` where the
    library allows it and ``out`` has the product's dtype (numpy's ``matmul(out=)``), else a
    new array."""
    if _is_numpy(A) and _is_numpy(B):
        if _is_numpy(out) and out.dtype == A.dtype and out.dtype == B.dtype:
            return np.matmul(A, B, out=out)
        return A @ B
    if sp.issparse(A) or sp.issparse(B):
        R = A @ B
        return np.asarray(R.toarray() if sp.issparse(R) else R)
    return A @ B


# --- checks and stores ----------------------------------------------------------------------------
_TOO_LARGE = "X has values too large for the kernel: squared distances overflow float64"
_OVERFLOW = (
    "X has values too large for the kernel: kernel values overflow float64 "
    "(scale the data or lower gamma)"
)


def max_finite(values) -> float:
    """The largest of per-row values (a squared norm, an L1 norm), as a float; a ValueError if
    one is not finite: the block would be nan or overflow.  On a device, one scalar read."""
    if values.shape[0] == 0:
        return 0.0
    top = float(values.max() if _is_numpy(values) else get_namespace(values).max(values))
    if not math.isfinite(top):
        raise ValueError(_TOO_LARGE)
    return top


def check_finite(K):
    """K, or a ValueError when it has an inf or a nan (the kernel's arithmetic overflowed)."""
    if nonfinite(K) is not None:
        raise ValueError(_OVERFLOW)
    return K


#: Bytes (of float64 rows) per share of :func:`nonfinite`'s threaded check of host data.
FINITE_SHARE_BYTES = 4 * 2**20


def nonfinite(data) -> str | None:
    """``"NaN"`` if an entry of ``data`` (any namespace) is NaN, else ``"infinity"`` if one is
    infinite, else None.  On the host scikit-learn's fast path, in threads over shares of about
    :data:`FINITE_SHARE_BYTES`: only a share whose sum is not finite is read entry by entry."""
    xp, found = get_namespace(data), []

    def check(start: int, stop: int) -> None:
        part = data[start:stop, ...]
        with np.errstate(over="ignore", invalid="ignore"):
            if bool(xp.all(xp.isfinite(xp.sum(part) if _is_numpy(part) else part))):
                return
        if not bool(xp.all(xp.isfinite(part))):  # a sum can overflow on finite entries
            found.append("NaN" if bool(xp.any(xp.isnan(part))) else "infinity")

    if _is_numpy(data) and data.dtype.kind not in "fc":
        return None
    rows = max(1, FINITE_SHARE_BYTES // (8 * max(1, math.prod(data.shape[1:]))))
    if not _is_numpy(data) or data.shape[0] <= rows:  # one share: no threads to wake
        check(0, data.shape[0])
    else:
        map_row_chunks(data.shape[0], check, chunk_rows=rows)
    return min(found, default=None)  # "NaN" before "infinity"


def store(K, out=None, dtype: str | None = None):
    """The block K in ``out`` (copied and cast unless K is ``out``), or, without ``out``, K in
    the float dtype ``dtype`` (default its own)."""
    if out is None:
        return K if dtype is None else astype_name(K, dtype)
    if K is not out:
        out[...] = K if _is_numpy(out) or _is_torch(out) else astype_name(K, float_name(out.dtype))
    return out


# --- element-wise, in place where the library allows ----------------------------------------------
def exp_(A):
    """``exp(A)``, overwriting A where the library can (numpy ``out=``, torch ``exp_``)."""
    if _is_numpy(A):
        return np.exp(A, out=A)
    if _is_torch(A):
        return A.exp_()
    return get_namespace(A).exp(A)


def tanh_(A):
    """``tanh(A)``, overwriting A where the library can."""
    if _is_numpy(A):
        return np.tanh(A, out=A)
    if _is_torch(A):
        return A.tanh_()
    return get_namespace(A).tanh(A)


def clip_(A, low: float | None = None, high: float | None = None):
    """A clipped to ``[low, high]`` (either bound may be None), overwriting A where the library
    can."""
    if _is_numpy(A):
        if low is not None:
            np.maximum(A, low, out=A)
        if high is not None:
            np.minimum(A, high, out=A)
        return A
    if _is_torch(A):
        return A.clamp_(min=low, max=high)
    placement = placement_of(A)
    xp = placement.xp
    if low is not None:
        A = xp.maximum(A, xp.asarray(low, dtype=A.dtype, device=placement.device))
    if high is not None:
        A = xp.minimum(A, xp.asarray(high, dtype=A.dtype, device=placement.device))
    return A


def fill_diagonal_(A, value: float):
    """Set the diagonal of the leading square of A to ``value`` (in place where the library can)."""
    if _is_numpy(A):
        np.fill_diagonal(A, value)
        return A
    if _is_torch(A):
        k = min(A.shape[0], A.shape[1])
        A[:k, :k].fill_diagonal_(value)
        return A
    if type(A).__module__.split(".")[0] == "cupy":
        import cupy

        cupy.fill_diagonal(A, value)
        return A
    placement = placement_of(A)
    xp = placement.xp
    eye = xp.eye(A.shape[0], A.shape[1], dtype=A.dtype, device=placement.device)
    return A * (1 - eye) + value * eye


def put_(a, indices, value: float):
    """``a[indices] = value`` for integer ``indices`` on the host (along a's first axis): in
    place where the library assigns through an integer array (numpy, PyTorch, CuPy), else a
    new array from a mask (the array API has no integer-array assignment: ``array_api_strict``).
    Returns the result."""
    indices = np.asarray(indices, dtype=np.int64)
    if _is_numpy(a):
        a[indices] = value
        return a
    placement = placement_of(a)
    if _is_torch(a) or type(a).__module__.split(".")[0] == "cupy":
        a[placement.asarray(indices)] = value
        return a
    mask = np.zeros(a.shape[0], dtype=bool)
    mask[indices] = True
    xp = placement.xp
    mask = xp.reshape(placement.asarray(mask), (-1,) + (1,) * (a.ndim - 1))
    return xp.where(mask, xp.asarray(value, dtype=a.dtype, device=placement.device), a)


def ones_rows(X, dtype: str):
    """A vector of ones, one per row of X, in the float dtype ``dtype`` on X's device (numpy for
    host rows, sparse or not)."""
    placement = placement_of(X)
    return placement.xp.ones(
        (X.shape[0],), dtype=getattr(placement.xp, dtype), device=placement.device
    )


# --- distances and special functions --------------------------------------------------------------
def l1_distances(X, Y):
    """``D[i, l] = sum_j |X[i, j] - Y[l, j]|`` in float64 (float64 rows in).

    scikit-learn's ``manhattan_distances`` for sparse rows, torch's ``cdist(p=1)`` (no
    ``(rows, cols, d)`` temporary), elsewhere a sum over the feature axis.
    """
    if sp.issparse(X) or sp.issparse(Y):
        from sklearn.metrics.pairwise import manhattan_distances

        return manhattan_distances(as_float64(X), as_float64(Y))
    if _is_torch(X):
        import torch

        return torch.cdist(X, Y, p=1.0)
    placement = placement_of(X)
    xp = placement.xp
    D = xp.zeros((X.shape[0], Y.shape[0]), dtype=X.dtype, device=placement.device)
    for j in range(X.shape[1]):
        D += xp.abs(X[:, j : j + 1] - xp.reshape(Y[:, j], (1, -1)))
    return D


def bessel_kv(nu: float, t):
    """The modified Bessel function of the second kind ``K_nu(t)`` (scipy's ``kv``), for host
    (numpy) arrays only: a kernel that needs it has no namespace math."""
    return special.kv(nu, t)
