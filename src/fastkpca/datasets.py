"""Data sets: the papers' real data (downloaded once, then cached), the embedded demo set, and
RandomNoisy.

:func:`fetch` downloads a data set's files (:data:`SOURCES`), checks their size and SHA-256 and
caches them under the data home (:func:`get_data_home`: ``data_home``, else ``FASTKPCA_DATA``,
else ``~/fastkpca_data``); :func:`load` reads them.  :func:`load_demo` reads the pendigits
sample shipped in the package.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import logging
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._utils import as_generator, check_int
from .source.files import open_data

__all__ = [
    "load",
    "fetch",
    "get_data_home",
    "load_demo",
    "make_random_noisy",
    "make_bag_of_words",
    "DATASETS",
    "SOURCES",
    "RemoteFile",
]

logger = logging.getLogger(__name__)


def make_bag_of_words(n_samples, n_features, nnz_per_row, n_topics=10, random_state=None):
    """Sparse, wide rows like word counts: the input-sparsity case of Musco & Woodruff.

    Each row has ``nnz_per_row`` word draws from its topic (a block of ``n_features /
    n_topics`` words) or, with probability 1/2, uniform; counts ``1 + Poisson(1)``; rows of
    unit norm.

    Returns
    -------
    X : CSR matrix of shape (n_samples, n_features), float64.
    """
    n = check_int("n_samples", n_samples, low=1)
    d = check_int("n_features", n_features, low=1)
    nnz = check_int("nnz_per_row", nnz_per_row, low=1, high=d)
    topics = check_int("n_topics", n_topics, low=1, high=d)
    rng = as_generator(random_state)
    topic = rng.integers(topics, size=n)
    block = d // topics
    own = topic[:, None] * block + rng.integers(0, block, (n, nnz))
    cols = np.where(rng.random((n, nnz)) < 0.5, own, rng.integers(0, d, (n, nnz)))
    vals = rng.poisson(1.0, (n, nnz)) + 1.0
    rows = np.repeat(np.arange(n), nnz)
    X = sp.csr_matrix((vals.ravel(), (rows, cols.ravel())), shape=(n, d))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / norms) @ X)


#: The signal dimension of RandomNoisy in the streaming KPCA paper (Ghashami, Perry & Phillips,
#: 2016, section 5): :func:`make_random_noisy`'s default, capped at ``n_features``.
RANDOM_NOISY_SIGNAL_DIM = 50


def make_random_noisy(
    n_samples, n_features, signal_dim=None, zeta=10.0, random_state=None, dtype=np.float64
):
    """The RandomNoisy set of the streaming KPCA paper: ``A = S D U + F / zeta``.

    Ghashami, Perry & Phillips (2016, section 5): S is n x s i.i.d. N(0, 1), ``D_ii = 1 - (i -
    1) / d``, U is s x d with orthonormal rows, F is n x d i.i.d. N(0, 1) noise.  Rows are
    generated in blocks.

    Parameters
    ----------
    n_samples : int
        Rows n.
    n_features : int
        Columns d.
    signal_dim : int or None, default None
        Rank s of the signal; None: the paper's 50, capped at ``n_features``.
    zeta : float, default 10.0
        Signal-to-noise ratio: the noise is ``F / zeta``.
    random_state : None, int or numpy.random.Generator
        Seed of S, U and F.
    dtype : dtype, default float64
        Of the output.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features) and the requested dtype.
    """
    n = check_int("n_samples", n_samples, low=1)
    d = check_int("n_features", n_features, low=1)
    if signal_dim is None:
        s = min(RANDOM_NOISY_SIGNAL_DIM, d)
    else:
        s = check_int("signal_dim", signal_dim, low=1)
        if s > d:
            raise ValueError(
                f"signal_dim={s} is larger than n_features={d}: the signal's rank is at most "
                "the data's width (signal_dim=None takes min(50, n_features))"
            )
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


#: The data sets :func:`load` knows, with their file layout under the data home.
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

#: The data home when neither ``data_home`` nor ``FASTKPCA_DATA`` is given.
DEFAULT_DATA_HOME = Path("~") / "fastkpca_data"


@dataclass(frozen=True)
class RemoteFile:
    """A data file as its publisher distributes it: ``urls`` (tried in order), and the
    ``sha256`` and ``size`` a download must match byte for byte."""

    urls: tuple[str, ...]
    sha256: str
    size: int


_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
_LIBSVM = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary"
_PMLB = "https://github.com/EpistasisLab/pmlb/raw/master/datasets"
_MNIST = ("https://ossci-datasets.s3.amazonaws.com/mnist", "https://yann.lecun.com/exdb/mnist")

#: Where :func:`fetch` downloads each file of :data:`DATASETS` (by its path under the data home),
#: with the SHA-256 and size of the file as distributed.  Sources and licences: pendigits and
#: german from the UCI Machine Learning Repository (CC BY 4.0); adult as LIBSVM's a9a
#: preprocessing of UCI Adult (CC BY 4.0); cpu_act (Delve comp-activ) and kddcup (UCI KDD Cup
#: 1999) from the Penn Machine Learning Benchmarks (PMLB) collection; MNIST (LeCun, Cortes &
#: Burges; CC BY-SA 3.0) from the mirror torchvision uses, then its original address.
SOURCES: dict[str, RemoteFile] = {
    "pendigits/pendigits.tra": RemoteFile(
        (f"{_UCI}/pendigits/pendigits.tra",),
        "e2b9eb9f0d0467e2b64a4816a3420edf2b8043447576f4b84337aba44a9f97d3",
        502098,
    ),
    "pendigits/pendigits.tes": RemoteFile(
        (f"{_UCI}/pendigits/pendigits.tes",),
        "8bd03229c5c5291fefe43e45465dd948d2645bf23328b9d993e0b777666b2015",
        234366,
    ),
    "german/german.data-numeric": RemoteFile(
        (f"{_UCI}/statlog/german/german.data-numeric",),
        "2752b044394958ab6dd193a0b56ca0f0b3a2d8bc7cb8c008e35a5e84bbec02f8",
        102000,
    ),
    "a9a/a9a": RemoteFile(
        (f"{_LIBSVM}/a9a",),
        "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906",
        2329875,
    ),
    "a9a/a9a.t": RemoteFile(
        (f"{_LIBSVM}/a9a.t",),
        "1f7bae8e9729ad2bf9d18f66e5fa622e503e615114f92c37b274dfd24f2e5725",
        1164633,
    ),
    "cpu_act/pmlb_197_cpu_act.tsv.gz": RemoteFile(
        (f"{_PMLB}/197_cpu_act/197_cpu_act.tsv.gz",),
        "d00fd6bac2eda0821a04ff10277663d211127745a19a474c0feee41a16914fdc",
        381809,
    ),
    "kddcup/pmlb_kddcup.tsv.gz": RemoteFile(
        (f"{_PMLB}/kddcup/kddcup.tsv.gz",),
        "719efc2cb0f94f49721de58ec6c9dc58bdbb16b241d00c61eafe47f737fcbfc2",
        1788387,
    ),
    "mnist/train-images-idx3-ubyte.gz": RemoteFile(
        tuple(f"{base}/train-images-idx3-ubyte.gz" for base in _MNIST),
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        9912422,
    ),
    "mnist/train-labels-idx1-ubyte.gz": RemoteFile(
        tuple(f"{base}/train-labels-idx1-ubyte.gz" for base in _MNIST),
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        28881,
    ),
    "mnist/t10k-images-idx3-ubyte.gz": RemoteFile(
        tuple(f"{base}/t10k-images-idx3-ubyte.gz" for base in _MNIST),
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        1648877,
    ),
    "mnist/t10k-labels-idx1-ubyte.gz": RemoteFile(
        tuple(f"{base}/t10k-labels-idx1-ubyte.gz" for base in _MNIST),
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        4542,
    ),
}

#: Seconds a download may wait for the server before the next mirror is tried.
DOWNLOAD_TIMEOUT = 60.0


def _checkout_root() -> Path | None:
    """The repository root when fastkpca is imported from a source checkout (src layout)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def get_data_home(data_home=None) -> Path:
    """The folder :func:`fetch` caches the data sets in (it is not created here).

    ``data_home`` if given, else the ``FASTKPCA_DATA`` environment variable if set, else
    ``~/fastkpca_data``; ``~`` is expanded.
    """
    if data_home is None:
        data_home = os.environ.get(DATA_ENV) or None
    return Path(data_home if data_home is not None else DEFAULT_DATA_HOME).expanduser()


def _search_homes(data_home) -> tuple[list[Path], bool]:
    """The folders :func:`load` looks in, in order, and whether the home was given explicitly.

    An explicit home (argument or ``FASTKPCA_DATA``) is the only one; otherwise the default
    cache, then the ``shared/data`` folders of a development layout.
    """
    explicit = data_home is not None or bool(os.environ.get(DATA_ENV))
    homes = [get_data_home(data_home)]
    if not explicit:
        homes.append(Path("..") / "shared" / "data")
        root = _checkout_root()
        if root is not None:
            homes.append(root.parent / "shared" / "data")
    return homes, explicit


def _file_paths(spec: _Spec, subsets) -> list[str]:
    """The relative paths of a data set's files for the given subsets."""
    paths: list[str] = []
    for s in subsets:
        rel = spec.files[s]
        paths.extend(rel if isinstance(rel, tuple) else (rel,))
    return paths


def _find(rel: str, homes: list[Path]) -> Path | None:
    for home in homes:
        if (home / rel).is_file():
            return home / rel
    return None


def _locate(name: str, rel: str, homes: list[Path], explicit: bool) -> Path:
    """The path of one data file, or a FileNotFoundError that says where it looked and how to
    get the file."""
    path = _find(rel, homes)
    if path is not None:
        return path
    if explicit and not homes[0].is_dir():
        raise FileNotFoundError(
            f"data home not found: {homes[0]}; create it with "
            f"fastkpca.datasets.fetch({name!r}, data_home=...)"
        )
    looked = homes[0] / rel
    elsewhere = "" if len(homes) == 1 else f" (nor under {', '.join(map(str, homes[1:]))})"
    how = f"fastkpca.datasets.fetch({name!r}" + (", data_home=...)" if explicit else ")")
    raise FileNotFoundError(f"data file not found: {looked}{elsewhere}; download it with {how}")


def _download(rel: str, remote: RemoteFile, dest: Path) -> None:
    """Download one file to ``dest`` through a temporary file in the same folder, renamed only
    once its size and SHA-256 match: an interrupted or corrupted download leaves nothing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in remote.urls:
        logger.info("downloading %s from %s", rel, url)
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        tmp = Path(tmp_name)
        try:
            digest = hashlib.sha256()
            size = 0
            with (
                os.fdopen(fd, "wb") as out,
                urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response,
            ):
                while chunk := response.read(1 << 20):
                    size += len(chunk)
                    if size > remote.size:  # bounded: never more than the file's size
                        raise ValueError(f"more than the expected {remote.size} bytes")
                    digest.update(chunk)
                    out.write(chunk)
            if size != remote.size:
                raise ValueError(f"{size} bytes, expected {remote.size}")
            if digest.hexdigest() != remote.sha256:
                raise ValueError(
                    f"SHA-256 {digest.hexdigest()} differs from the expected {remote.sha256}"
                )
            tmp.chmod(0o644)
            os.replace(tmp, dest)
            return
        except (OSError, ValueError, http.client.HTTPException) as exc:
            errors.append(f"{url}: {exc}")
        finally:
            tmp.unlink(missing_ok=True)
    raise OSError(f"could not download {rel} (nothing was written): " + "; ".join(errors))


def fetch(name, data_home=None, *, subset="all", dtype=np.float64, max_rows=None):
    """Download a real data set if it is not cached yet, then load it as ``(X, y)``.

    Each missing file is downloaded (:data:`SOURCES`) into :func:`get_data_home` and renamed
    into place once its size and SHA-256 match.

    Parameters
    ----------
    name : {"pendigits", "german", "cpu_act", "adult", "mnist", "kddcup"}
        See :data:`DATASETS`.
    data_home : path, optional
        Where to cache the files (created if missing).
    subset, dtype, max_rows
        As for :func:`load`.

    Returns
    -------
    X, y
        As :func:`load` returns them.

    Raises
    ------
    OSError
        When no source of a file gave the expected file; the message names each URL tried.
    """
    spec, subsets = _check_request(name, subset)
    homes, explicit = _search_homes(data_home)
    for rel in _file_paths(spec, subsets):
        if _find(rel, homes) is None:
            _download(rel, SOURCES[rel], homes[0] / rel)
    return load(name, data_home, subset=subset, dtype=dtype, max_rows=max_rows)


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


def _load_file(spec: _Spec, locate, rel, dtype, max_rows):
    if spec.kind == "idx":
        images = _read_idx(locate(rel[0]), max_rows)
        labels = _read_idx(locate(rel[1]), max_rows)
        return images.reshape(images.shape[0], -1).astype(dtype), labels.astype(np.int64)
    path = locate(rel)
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


def _check_request(name, subset):
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; choose one of {sorted(DATASETS)}")
    spec = DATASETS[name]
    if subset == "all":
        return spec, list(spec.files)
    if subset in ("train", "test"):
        if subset not in spec.files:
            raise ValueError(f"{name} has no train/test split; use subset='all'")
        return spec, [subset]
    raise ValueError(f"subset must be 'all', 'train' or 'test', got {subset!r}")


def load(name, data_home=None, *, subset="all", dtype=np.float64, max_rows=None):
    """Load a real data set as ``(X, y)`` from the files :func:`fetch` downloaded.

    Parameters
    ----------
    name : {"pendigits", "german", "cpu_act", "adult", "mnist", "kddcup"}
        See :data:`DATASETS`, and :data:`SOURCES` for each one's source and licence.
    data_home : path, optional
        The folder with the data sets (:func:`get_data_home`); without it, a development
        checkout's ``shared/data`` is searched too.
    subset : {"all", "train", "test"}
        For the sets published with a split (pendigits, adult, mnist); train first in "all".
    dtype : float64 (default) or float32
        dtype of X; values as published (no scaling).
    max_rows : int, optional
        Read only the first ``max_rows`` rows of each file.

    Returns
    -------
    X : ndarray (n_samples, n_features), or scipy.sparse CSR for ``"adult"``.
    y : ndarray (n_samples,): int64 class labels (adult: -1 / +1), float64 for ``cpu_act``.

    Raises
    ------
    FileNotFoundError
        Naming the file looked for and the :func:`fetch` call that downloads it.
    """
    spec, subsets = _check_request(name, subset)
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype must be float64 or float32, got {dtype}")
    if max_rows is not None:
        max_rows = check_int("max_rows", max_rows, low=1)
    homes, explicit = _search_homes(data_home)

    def locate(rel):
        return _locate(name, rel, homes, explicit)

    parts = [_load_file(spec, locate, spec.files[s], dtype, max_rows) for s in subsets]
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
