"""Data set loaders: the real files in ../shared/data (skipped when absent), a synthetic layout
(always), the data-home search order, and the embedded demo set."""

import gzip
import hashlib
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import REPO, SHARED_DATA

from fastkpca import datasets
from fastkpca.datasets import get_data_home, load, load_demo

needs_data = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"shared data not found at {SHARED_DATA}"
)


# --- the real files ------------------------------------------------------------------------------


@needs_data
def test_checksums_of_shared_files():
    """The files are the published ones (SHA256SUMS beside them), so shapes below are meaningful."""
    for line in (SHARED_DATA / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        h = hashlib.sha256((SHARED_DATA / name).read_bytes()).hexdigest()
        assert h == digest, name


@needs_data
@pytest.mark.parametrize(
    "name,subset,shape,labels",
    [
        ("pendigits", "train", (7494, 16), set(range(10))),
        ("pendigits", "test", (3498, 16), set(range(10))),
        ("pendigits", "all", (10992, 16), set(range(10))),
        ("german", "all", (1000, 24), {1, 2}),
        ("adult", "train", (32561, 123), {-1, 1}),
        ("adult", "test", (16281, 123), {-1, 1}),
    ],
)
def test_real_shapes_and_labels(name, subset, shape, labels):
    X, y = load(name, SHARED_DATA, subset=subset)
    assert X.shape == shape and y.shape == (shape[0],)
    assert set(np.unique(y).tolist()) == labels
    assert y.dtype == np.int64 and X.dtype == np.float64
    if name == "adult":
        assert sp.issparse(X) and X.format == "csr"
        # binary indicator features (a9a.t stores one explicit "123:0" to fix the width)
        assert set(np.unique(X.data).tolist()) <= {0.0, 1.0}
        first = {
            "train": [3, 11, 14, 19, 39, 42, 55, 64, 67, 73, 75, 76, 80, 83],  # 1-based
            "test": [1, 6, 17, 21, 35, 42, 54, 62, 71, 73, 74, 76, 80, 83],
        }[subset]
        np.testing.assert_array_equal(np.sort(X[0].indices) + 1, first)
    else:
        assert np.isfinite(X).all()


@needs_data
def test_pendigits_values_match_the_file():
    X, y = load("pendigits", SHARED_DATA, subset="train")
    np.testing.assert_array_equal(
        X[0], [47, 100, 27, 81, 57, 37, 26, 0, 0, 23, 56, 53, 100, 90, 40, 98]
    )
    assert y[0] == 8
    Xa, ya = load("pendigits", SHARED_DATA)  # "all" is train then test
    np.testing.assert_array_equal(Xa[:7494], X)


@needs_data
def test_cpu_act_header_and_real_target():
    X, y = load("cpu_act", SHARED_DATA, dtype=np.float32)
    assert X.shape == (8192, 21) and X.dtype == np.float32 and y.dtype == np.float64
    np.testing.assert_array_equal(X[0, :3], [6, 2, 1036])
    assert y[0] == 90.0


@needs_data
def test_mnist_test_set():
    X, y = load("mnist", SHARED_DATA, subset="test")
    assert X.shape == (10000, 784) and X.min() == 0 and X.max() == 255
    assert np.bincount(y).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@needs_data
def test_kddcup_first_rows():
    X, y = load("kddcup", SHARED_DATA, max_rows=1000)
    assert X.shape == (1000, 41) and y.shape == (1000,)
    np.testing.assert_array_equal(X[0, :6], [0, 1, 22, 9, 181, 5450])
    assert y[0] == 11


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("name,shape", [("kddcup", (494020, 41)), ("mnist", (70000, 784))])
def test_large_sets_full(name, shape):
    X, y = load(name, SHARED_DATA, dtype=np.float32)
    assert X.shape == shape and y.shape == (shape[0],)
    assert (name != "kddcup") or len(np.unique(y)) == 23


@needs_data
def test_demo_set_is_pendigits_test():
    X, y = load_demo()
    Xt, yt = load("pendigits", SHARED_DATA, subset="test")
    np.testing.assert_array_equal(X, Xt)
    np.testing.assert_array_equal(y, yt)


# --- a synthetic layout (runs without the shared data) --------------------------------------------


def _idx_bytes(arr):
    head = bytes([0, 0, 0x08, arr.ndim]) + b"".join(struct.pack(">i", d) for d in arr.shape)
    return head + arr.astype(np.uint8).tobytes()


@pytest.fixture
def fake_home(tmp_path):
    """The ../shared/data layout with a few rows per set."""
    home = tmp_path / "data"
    for sub in ("pendigits", "german", "cpu_act", "a9a", "mnist", "kddcup"):
        (home / sub).mkdir(parents=True)
    (home / "pendigits/pendigits.tra").write_text(" 47,100, 27, 8\n  0, 89, 27, 2\n")
    (home / "pendigits/pendigits.tes").write_text("  1,  2,  3, 0\n")
    (home / "german/german.data-numeric").write_text("   1   6   4   1 \n   2  48   2   2 \n")
    with gzip.open(home / "cpu_act/pmlb_197_cpu_act.tsv.gz", "wt") as f:
        f.write("lread\tlwrite\ttarget\n6.0\t2.0\t90.0\n1.0\t0.0\t88.5\n")
    with gzip.open(home / "kddcup/pmlb_kddcup.tsv.gz", "wt") as f:
        f.write("a\tb\ttarget\n" + "".join(f"{i}\t{2 * i}\t{i % 3}\n" for i in range(10)))
    (home / "a9a/a9a").write_text("-1 3:1 11:1\n+1 1:1\n")
    (home / "a9a/a9a.t").write_text("+1 123:1\n")
    images = np.arange(3 * 28 * 28).reshape(3, 28, 28) % 256
    for prefix, n in (("train", 3), ("t10k", 2)):
        (home / f"mnist/{prefix}-images-idx3-ubyte.gz").write_bytes(
            gzip.compress(_idx_bytes(images[:n]))
        )
        (home / f"mnist/{prefix}-labels-idx1-ubyte.gz").write_bytes(
            gzip.compress(_idx_bytes(np.arange(n) + 4))
        )
    return home


def test_synthetic_layout(fake_home):
    X, y = load("pendigits", fake_home)
    np.testing.assert_array_equal(X, [[47, 100, 27], [0, 89, 27], [1, 2, 3]])
    np.testing.assert_array_equal(y, [8, 2, 0])
    X, y = load("german", fake_home)
    np.testing.assert_array_equal(X, [[1, 6, 4], [2, 48, 2]])
    np.testing.assert_array_equal(y, [1, 2])
    X, y = load("cpu_act", fake_home)
    np.testing.assert_array_equal(X, [[6, 2], [1, 0]])
    np.testing.assert_array_equal(y, [90.0, 88.5])
    X, y = load("adult", fake_home)
    assert sp.issparse(X) and X.shape == (3, 123)  # fixed width even if a file uses fewer
    np.testing.assert_array_equal(X.toarray()[0, [2, 10]], [1, 1])
    assert X[2, 122] == 1
    np.testing.assert_array_equal(y, [-1, 1, 1])
    X, y = load("mnist", fake_home, subset="train")
    assert X.shape == (3, 784) and X[1, 0] == 784 % 256
    np.testing.assert_array_equal(y, [4, 5, 6])
    X, y = load("mnist", fake_home)
    assert X.shape == (5, 784)
    X, y = load("kddcup", fake_home, max_rows=4)
    np.testing.assert_array_equal(X[:, 1], [0, 2, 4, 6])
    np.testing.assert_array_equal(y, [0, 1, 2, 0])


def test_subset_and_name_errors(fake_home):
    with pytest.raises(ValueError, match="german has no train/test split"):
        load("german", fake_home, subset="train")
    with pytest.raises(ValueError, match="subset must be"):
        load("pendigits", fake_home, subset="validation")
    with pytest.raises(ValueError, match="unknown data set 'covtype'"):
        load("covtype", fake_home)
    with pytest.raises(ValueError, match="dtype"):
        load("german", fake_home, dtype=np.int32)


def test_missing_file_names_the_path(fake_home):
    (fake_home / "pendigits/pendigits.tes").unlink()
    with pytest.raises(FileNotFoundError, match=r"pendigits/pendigits\.tes"):
        load("pendigits", fake_home)
    X, _ = load("pendigits", fake_home, subset="train")  # the other file still loads
    assert X.shape == (2, 3)


def test_truncated_idx(fake_home):
    path = fake_home / "mnist/t10k-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-10]))
    with pytest.raises(ValueError, match="truncated IDX"):
        load("mnist", fake_home, subset="test")


# --- where the data live --------------------------------------------------------------------------


def test_data_home_search_order(fake_home, tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "DEFAULT_DATA_HOME", tmp_path / "cache")
    monkeypatch.setenv("FASTKPCA_DATA", str(fake_home))
    assert get_data_home() == fake_home  # the environment variable
    assert load("german")[0].shape == (2, 3)
    other = tmp_path / "other"
    other.mkdir()
    assert get_data_home(other) == other  # the argument wins over the variable
    monkeypatch.setenv("FASTKPCA_DATA", str(tmp_path / "typo"))
    with pytest.raises(FileNotFoundError, match="data home not found: .*typo.*fetch"):
        load("german")
    # without either: the default cache, then shared/data beside the current directory
    monkeypatch.delenv("FASTKPCA_DATA")
    assert get_data_home() == tmp_path / "cache"
    repo = tmp_path / "work" / "repo"
    repo.mkdir(parents=True)
    (tmp_path / "work" / "shared").mkdir()
    fake_home.rename(tmp_path / "work" / "shared" / "data")
    monkeypatch.chdir(repo)
    assert load("german")[0].shape == (2, 3)
    # a file in the cache is preferred to the development layout's
    (tmp_path / "cache" / "german").mkdir(parents=True)
    (tmp_path / "cache" / "german" / "german.data-numeric").write_text(" 5 6 1\n")
    np.testing.assert_array_equal(load("german")[0], [[5, 6]])


def test_default_data_home_is_in_the_user_folder(monkeypatch):
    monkeypatch.delenv("FASTKPCA_DATA", raising=False)
    assert get_data_home() == Path("~/fastkpca_data").expanduser()
    assert get_data_home("~/x") == Path("~/x").expanduser()


def test_no_data_anywhere_names_the_file_and_fetch(tmp_path, monkeypatch):
    monkeypatch.delenv("FASTKPCA_DATA", raising=False)
    monkeypatch.setattr(datasets, "DEFAULT_DATA_HOME", tmp_path / "cache")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets, "_checkout_root", lambda: tmp_path / "checkout")
    with pytest.raises(FileNotFoundError) as info:
        load("german")
    message = str(info.value)
    assert str(tmp_path / "cache" / "german" / "german.data-numeric") in message
    assert "fastkpca.datasets.fetch('german')" in message


def test_data_home_default_finds_shared_data(tmp_path, monkeypatch):
    """From the repository root, and from anywhere when running from the checkout."""
    if not SHARED_DATA.is_dir() or "FASTKPCA_DATA" in os.environ:
        pytest.skip("needs ../shared/data beside the checkout")
    monkeypatch.setattr(datasets, "DEFAULT_DATA_HOME", tmp_path / "empty-cache")
    monkeypatch.chdir(REPO)
    assert load("german")[0].shape == (1000, 24)
    monkeypatch.chdir(tmp_path)  # no ../shared/data here: the checkout's is found
    assert load("german")[0].shape == (1000, 24)


# --- the embedded demo set ------------------------------------------------------------------------


def test_load_demo():
    X, y = load_demo()
    assert X.shape == (3498, 16) and X.dtype == np.float64
    assert X.min() == 0 and X.max() == 100
    assert np.bincount(y).tolist() == [363, 364, 364, 336, 364, 335, 336, 364, 336, 336]
    X32, _ = load_demo(dtype=np.float32)
    assert X32.dtype == np.float32


def test_make_bag_of_words_rows():
    from fastkpca.datasets import make_bag_of_words

    X = make_bag_of_words(300, 5000, 40, n_topics=5, random_state=0)
    assert sp.issparse(X) and X.format == "csr"
    assert X.shape == (300, 5000)
    nnz = np.diff(X.indptr)
    assert np.all((nnz >= 1) & (nnz <= 40))
    # rows of unit norm, counts positive
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, 1.0, rtol=1e-12)
    assert X.data.min() > 0
    # the same seed, the same rows; words concentrate on each row's topic block
    Y = make_bag_of_words(300, 5000, 40, n_topics=5, random_state=0)
    assert (X != Y).nnz == 0
    # half of each row's draws fall in its topic's block (plus a fifth of the uniform half)
    rows = np.repeat(np.arange(300), nnz)
    counts = np.zeros((300, 5))
    np.add.at(counts, (rows, X.indices // 1000), 1)
    share = counts.max(axis=1) / nnz
    assert 0.5 < share.mean() < 0.7
    for bad in ({"nnz_per_row": 0}, {"nnz_per_row": 6000}, {"n_topics": 0}):
        args = {"n_samples": 10, "n_features": 5000, "nnz_per_row": 5, **bad}
        with pytest.raises(ValueError):
            make_bag_of_words(**args)


def test_make_random_noisy_default_signal_fits_any_width():
    # signal_dim=None is the paper's 50, capped at n_features: make_random_noisy(n, 20) works
    # (it used to refuse "signal_dim=50", a parameter the user never passed).
    from fastkpca.datasets import make_random_noisy

    X = make_random_noisy(3000, 20, random_state=0)
    assert X.shape == (3000, 20) and X.dtype == np.float64
    # 50 and more columns: the paper's s = 50, the same rows as passing it
    np.testing.assert_array_equal(
        make_random_noisy(200, 60, random_state=1),
        make_random_noisy(200, 60, signal_dim=50, random_state=1),
    )
    np.testing.assert_array_equal(
        make_random_noisy(200, 20, random_state=1),
        make_random_noisy(200, 20, signal_dim=20, random_state=1),
    )
    # an explicit signal_dim wider than the data is refused, naming both parameters
    with pytest.raises(ValueError, match=r"signal_dim=30 is larger than n_features=20"):
        make_random_noisy(10, 20, signal_dim=30)
    for bad in ({"signal_dim": 0}, {"n_features": 0}, {"zeta": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            make_random_noisy(**{"n_samples": 10, "n_features": 20, **bad})
