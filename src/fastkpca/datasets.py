"""Data sets: loaders for the papers' real data, the embedded demo set, and RandomNoisy.

:func:`load` reads the public data sets from the layout of ``../shared/data`` (see
:data:`DATASETS`); the files are never bundled with fastkpca.  Where the data live is decided by
:func:`get_data_home`: the ``data_home`` argument, else the ``FASTKPCA_DATA`` environment
variable, else the first existing ``../shared/data`` relative to the current directory, then
relative to the source checkout fastkpca is imported from.

:func:`load_demo` reads the small pendigits sample shipped inside the package (``data/``), so the
demo runs anywhere.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._utils import as_generator, check_int

__all__ = ["load", "get_data_home", "load_demo", "make_random_noisy", "DATASETS"]


def make_random_noisy(
    n_samples, n_features, signal_dim=50, zeta=10.0, random_state=None, dtype=np.float64
):
    """The RandomNoisy set of the streaming KPCA paper: ``A = S D U + F / zeta``.

    Ghashami, Perry & Phillips (2016, section 5, after Liberty's Frequent Directions paper):
    S is n x s with i.i.d. N(0, 1) entries, D is diagonal with ``D_ii = 1 - (i - 1) / d``
    (linearly decreasing), U is s x d with orthonormal rows (a random rotation), F is n x d
    i.i.d. N(0, 1) noise and ``zeta`` sets the signal-to-noise ratio (the paper uses s = 50,
    zeta = 10).  Rows are generated in blocks, so only the output is held in memory.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features) and the requested dtype.
    """
    n = check_int("n_samples", n_samples, low=1)
    d = check_int("n_features", n_features, low=1)
    s = check_int("signal_dim", signal_dim, low=1, high=d)
    if not zeta > 0:
        raise ValueError(f"zeta must be > 0, got {zeta!r}")
    rng = as_generator(random_state)
    U, _ = np.linalg.qr(rng.standard_normal((d, s)))  # d x s, orthonormal columns
    DU = (1.0 - np.arange(s) / d)[:, None] * U.T  # D U, s x d
    X = np.empty((n, d), dtype=dtype)
    block = 65536
    for start in range(0, n, block):
        stop = min(n, start + block)
        S = rng.standard_normal((stop - start, s))
        X[start:stop] = S @ DU + rng.standard_normal((stop - start, d)) / zeta
    return X


# --- real data sets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    """Where a data set lives under the data home and how to read it."""

    files: dict  # subset ("train", "test", or "all" for unsplit sets) -> relative path
    kind: str  # "text" (label in the last column), "libsvm" or "idx"
    n_features: int
    label_dtype: type = np.int64
    description: str = ""


#: The data sets :func:`load` knows, with the file layout of ``../shared/data``.
DATASETS: dict[str, _Spec] = {
    "pendigits": _Spec(
        {"train": "pendigits/pendigits.tra", "test": "pendigits/pendigits.tes"},
        "text",
        16,
        description="UCI pen digits, 7494 + 3498 x 16, labels 0-9",
    ),
    "german": _Spec(
        {"all": "german/german.data-numeric"},
        "text",
        24,
        description="UCI Statlog German credit (numeric), 1000 x 24, labels 1/2",
    ),
    "cpu_act": _Spec(
        {"all": "cpu_act/pmlb_197_cpu_act.tsv.gz"},
        "text",
        21,
        np.float64,
        description="Delve comp-activ via PMLB, 8192 x 21, real target",
    ),
    "adult": _Spec(
        {"train": "a9a/a9a", "test": "a9a/a9a.t"},
        "libsvm",
        123,
        description="UCI Adult as LIBSVM a9a, 32561 + 16281 x 123 sparse binary, labels -1/+1",
    ),
    "mnist": _Spec(
        {
            "train": ("mnist/train-images-idx3-ubyte.gz", "mnist/train-labels-idx1-ubyte.gz"),
            "test": ("mnist/t10k-images-idx3-ubyte.gz", "mnist/t10k-labels-idx1-ubyte.gz"),
        },
        "idx",
        784,
        description="MNIST, 60000 + 10000 x 784 pixels 0-255, labels 0-9",
    ),
    "kddcup": _Spec(
        {"all": "kddcup/pmlb_kddcup.tsv.gz"},
        "text",
        41,
        description="KDD Cup 1999 via PMLB, 494020 x 41, 23 classes",
    ),
}

#: The environment variable naming the data home.
DATA_ENV = "FASTKPCA_DATA"


def _checkout_root() -> Path | None:
    """The repository root when fastkpca is imported from a source checkout (src layout)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def get_data_home(data_home=None) -> Path:
    """The folder holding the data sets.

    Search order: ``data_home`` if given; else ``$FASTKPCA_DATA`` if set (both are used as given,
    existing or not, so a typo is reported rather than silently replaced); else the first
    existing of ``./../shared/data`` (relative to the current directory, e.g. the repository
    root) and ``<checkout>/../shared/data`` (beside the source checkout fastkpca is imported
    from).

    Raises
    ------
    FileNotFoundError
        Naming the folder(s) looked for, when none exists.
    """
    if data_home is None:
        data_home = os.environ.get(DATA_ENV) or None
    if data_home is not None:
        path = Path(data_home).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"data home not found: {path}")
        return path
    candidates = [Path("..") / "shared" / "data"]
    root = _checkout_root()
    if root is not None:
        candidates.append(root.parent / "shared" / "data")
    for path in candidates:
        if path.is_dir():
            return path
    raise FileNotFoundError(
        "data home not found: looked for "
        + " and ".join(str(p.resolve()) for p in candidates)
        + f"; set {DATA_ENV} or pass data_home="
    )


def _require(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    return path


def _read_idx(path: Path, max_items=None) -> np.ndarray:
    """An IDX array (LeCun's MNIST format: big-endian header, then uint8 data), gzipped or not.

    Header: two zero bytes, a type code (0x08 = uint8) and the number of dimensions, then each
    dimension as a big-endian int32.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        head = f.read(4)
        if len(head) != 4 or head[:2] != b"\0\0" or head[2] != 0x08:
            raise ValueError(f"{path}: not an IDX file of unsigned bytes")
        ndim = head[3]
        dims = np.frombuffer(f.read(4 * ndim), dtype=">i4").astype(int)
        if max_items is not None:
            dims[0] = min(dims[0], max_items)
        count = int(np.prod(dims))
        data = np.frombuffer(f.read(count), dtype=np.uint8)
    if data.size != count:
        raise ValueError(f"{path}: truncated IDX file ({data.size} of {count} bytes)")
    return data.reshape(dims)


def _load_file(spec: _Spec, home: Path, rel, dtype, max_rows):
    from .source.files import open_data

    if spec.kind == "idx":
        images = _read_idx(_require(home / rel[0]), max_rows)
        labels = _read_idx(_require(home / rel[1]), max_rows)
        return images.reshape(images.shape[0], -1).astype(dtype), labels.astype(np.int64)
    path = _require(home / rel)
    if spec.kind == "libsvm":
        reader = open_data(
            path, format="libsvm", n_features=spec.n_features, zero_based=False, dtype=dtype
        )
    else:
        reader = open_data(path, format="text", label_column=-1, dtype=dtype)
    Xs: list[Any] = []
    ys: list[Any] = []
    n = 0
    X: Any
    y: Any
    for X, y in reader.iter_labeled():
        if max_rows is not None and n + X.shape[0] > max_rows:
            X, y = X[: max_rows - n], y[: max_rows - n]
        Xs.append(X)
        ys.append(y)
        n += X.shape[0]
        if max_rows is not None and n >= max_rows:
            break
    X = sp.vstack(Xs, format="csr") if spec.kind == "libsvm" else np.concatenate(Xs)
    return X, np.concatenate(ys).astype(spec.label_dtype)


def load(name, data_home=None, *, subset="all", dtype=np.float64, max_rows=None):
    """Load a real data set as ``(X, y)``.

    Parameters
    ----------
    name : {"pendigits", "german", "cpu_act", "adult", "mnist", "kddcup"}
        See :data:`DATASETS` and ``../shared/data/README.md`` for sources and licences.
    data_home : path, optional
        The folder with the data sets; see :func:`get_data_home` for the default.
    subset : {"all", "train", "test"}
        For the sets published with a split (pendigits, adult, mnist): the training file, the
        test file, or both stacked (train first).  The others have one file: only ``"all"``.
    dtype : float64 (default) or float32
        dtype of X.  Values are as published (no scaling): pixels 0-255, pendigits 0-100.
    max_rows : int, optional
        Read only the first ``max_rows`` rows of each file (quick looks at the large sets).

    Returns
    -------
    X : ndarray (n_samples, n_features), or scipy.sparse CSR for ``"adult"``.
    y : ndarray (n_samples,): int64 class labels (adult: -1 / +1), float64 for ``cpu_act``.

    Raises
    ------
    FileNotFoundError
        Naming the data home or file looked for.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; choose one of {sorted(DATASETS)}")
    spec = DATASETS[name]
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype must be float64 or float32, got {dtype}")
    if max_rows is not None:
        max_rows = check_int("max_rows", max_rows, low=1)
    if subset == "all":
        subsets = list(spec.files)
    elif subset in ("train", "test"):
        if subset not in spec.files:
            raise ValueError(f"{name} has no train/test split; use subset='all'")
        subsets = [subset]
    else:
        raise ValueError(f"subset must be 'all', 'train' or 'test', got {subset!r}")
    home = get_data_home(data_home)
    parts = [_load_file(spec, home, spec.files[s], dtype, max_rows) for s in subsets]
    if len(parts) == 1:
        return parts[0]
    Xs, ys = zip(*parts, strict=True)
    X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs)
    return X, np.concatenate(ys)


# --- the embedded demo set -----------------------------------------------------------------------

DEMO_FILE = "pendigits_sample.npz"


def load_demo(dtype=np.float64):
    """The pendigits sample shipped with fastkpca: ``(X, y)``, 3498 x 16 (values 0-100), 10 classes.

    It is the UCI test file ``pendigits.tes`` (CC BY 4.0), stored as uint8; see
    ``fastkpca/data/README.md`` for provenance.
    """
    ref = resources.files("fastkpca") / "data" / DEMO_FILE
    with resources.as_file(ref) as path, np.load(path, allow_pickle=False) as f:
        X = f["X"].astype(dtype)
        y = f["y"].astype(np.int64)
    return X, y
