"""Rows that a method densifies are sized before they are allocated: a sparse input whose width
makes them too large is refused up front, naming the width and the memory."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from fastkpca import NystromKPCA, ReducedSetKPCA
from fastkpca.cli import main
from fastkpca.source import ArraySource, BlockSource
from tests.conftest import least_traced_peak

WIDTH = 10**6


@pytest.fixture
def wide():
    """50 sparse rows whose largest feature index is 10**6 - 1: 8 MB per row when dense."""
    rng = np.random.default_rng(0)
    rows = np.repeat(np.arange(50), 3)
    cols = rng.integers(0, 1000, size=rows.size)
    cols[0] = WIDTH - 1
    return sp.csr_matrix((rng.random(rows.size), (rows, cols)), shape=(50, WIDTH))


@pytest.fixture
def little_memory(monkeypatch):
    """64 MiB available: 20 dense rows of 10**6 float64 (160 MB) do not fit."""
    monkeypatch.setenv("FASTKPCA_MEMORY", "64M")


def test_dense_bytes_and_require_dense(wide, little_memory):
    source = ArraySource(wide, accept_sparse=True)
    assert source.dense_bytes(20) == 20 * WIDTH * 8
    source.require_dense(2, "two rows")  # 16 MB: fits
    with pytest.raises(ValueError) as exc:
        source.require_dense(20, "n_landmarks=20 landmarks")
    message = str(exc.value)
    assert "n_landmarks=20 landmarks as dense rows (20 x 1000000 float64)" in message
    assert "needs 153 MiB" in message and "64 MiB of memory available" in message
    assert "1000000 features wide (the data is sparse" in message


def _refused_before_allocating(fit):
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as exc:
            fit()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # refused before any dense row exists: far below one 8 MB dense row
    assert peak < 4 * 2**20, peak
    return str(exc.value)


def test_nystrom_kmeans_centres_are_sized_before_densifying(wide, little_memory):
    model = NystromKPCA(n_components=2, n_landmarks=20, landmarks="kmeans", random_state=0)
    message = _refused_before_allocating(lambda: model.fit(wide))
    assert "n_landmarks=20 landmarks as dense rows (20 x 1000000 float64)" in message


@pytest.mark.parametrize("landmarks", ["uniform", "rls", "rpcholesky"])
def test_nystrom_landmark_rows_stay_sparse(wide, little_memory, landmarks):
    """Landmark rows whose kernel values are all the method needs stay CSR (issue 32): the fit
    runs in 64 MiB, far below one dense row per landmark."""
    model = NystromKPCA(n_components=2, n_landmarks=20, landmarks=landmarks, random_state=0)
    tracemalloc.start()
    try:
        model.fit(wide)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sp.issparse(model.landmarks_) and model.landmarks_.shape == (20, WIDTH)
    assert peak < 16 * 2**20, peak  # 20 dense rows: 160 MB


def test_stream_sample_is_sized_before_the_pass(wide, little_memory):
    """A reservoir sample of a stream of CSR blocks is dense: refused before reading it."""
    blocks = [wide[:25], wide[25:]]
    source = BlockSource(blocks, accept_sparse=True)
    message = _refused_before_allocating(lambda: source.sample_rows(20, np.random.default_rng(0)))
    assert "a sample of 20 rows as dense rows (20 x 1000000 float64)" in message


@pytest.mark.parametrize("density", ["shadow", "kmeans"])
def test_reduced_set_is_sized_before_densifying(wide, little_memory, density):
    model = ReducedSetKPCA(n_components=2, density=density, n_centers=20, random_state=0)
    message = _refused_before_allocating(lambda: model.fit(wide))
    assert "ReducedSetKPCA(density=" in message and "1000000 float64" in message


def test_command_line_names_the_width(wide, little_memory, tmp_path, capsys):
    path = tmp_path / "wide.svm"
    coo = wide.tocoo()
    lines = [[] for _ in range(wide.shape[0])]
    for i, j, v in sorted(zip(coo.row, coo.col, coo.data, strict=True)):
        lines[i].append(f"{j + 1}:{v:.6f}")
    path.write_text("".join("1 " + " ".join(pairs) + "\n" for pairs in lines))
    # k-means needs the rows in memory, dense: refused before the file is read
    argv = ["fit", path, "-m", "nystrom", "--n-landmarks", "20", "--landmarks", "kmeans"]
    argv += ["-k", "2", "-o", tmp_path / "m"]
    assert main([str(a) for a in argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fastkpca: error: {path}'s rows as dense rows (50 x 1000000 float64)")
    assert "1000000 features wide" in err and "\n" not in err
    # uniform landmarks (the default) stay sparse: the same file fits in the same memory
    argv = ["fit", path, "-m", "nystrom", "--n-landmarks", "20", "-k", "2", "-o", tmp_path / "m"]
    assert main([str(a) for a in argv]) == 0


def test_evaluation_sample_selects_rows_before_densifying(tmp_path):
    """``evaluate`` / ``--estimate-error`` draw a few rows of the file: each block of a wide
    LIBSVM file is cut to those rows while sparse, never densified whole."""
    from argparse import Namespace

    from fastkpca.cli._data import _subsample
    from fastkpca.source.files import open_data

    rng = np.random.default_rng(0)
    path = tmp_path / "wide.svm"
    # 200 rows, width 2e5: a dense block of all rows would be 320 MB
    path.write_text("".join(f"1 {rng.integers(1, 1000)}:1.5 200000:2\n" for _ in range(200)))
    reader = open_data(path)
    drawn = []
    peak = least_traced_peak(
        lambda: drawn.append(_subsample(reader, Namespace(quiet=True), 5, np.random.default_rng(0)))
    )
    X, n = drawn[0]
    assert X.shape == (5, 200_000) and n == 200
    assert np.count_nonzero(X == 2.0) == 5
    # five dense rows are 8 MB; the parse of the file and the CSR blocks add little
    assert peak < 16 * 2**20, peak


class _Device:
    """A device placement that reports its free memory (as a GPU does)."""

    in_host_memory = False

    def free_memory_bytes(self):
        return 10**9


def test_the_stored_gram_is_checked_where_the_fit_runs(little_memory):
    """One check of the n x n Gram (ExactKPCA, KernelPCA) for every placement: against a device's
    free memory where it reports one, the process's memory elsewhere; the dense solve's
    workspace where it runs (LAPACK in place in host memory, a full eigh on a device)."""
    from fastkpca.decomposition.exact import GRAM_FRACTION, check_exact_fits
    from fastkpca.execution.arrays import HOST
    from fastkpca.execution.memory import memory_available_on

    assert memory_available_on(_Device()) == 10**9
    assert memory_available_on(HOST) == memory_available_on() == 64 * 2**20
    X = np.zeros((8000, 3))  # a 488 MiB Gram
    check_exact_fits(X, fraction=GRAM_FRACTION, n_components=10, placement=_Device())
    with pytest.raises(ValueError, match="Gram matrix .* 954 MiB of memory available"):
        # the device's eigh writes n x n eigenvectors and a workspace beside the Gram
        check_exact_fits(
            X, fraction=GRAM_FRACTION, n_components=10, method="dense", placement=_Device()
        )
    with pytest.raises(ValueError, match="ExactKPCA's 8000 x 8000 Gram matrix .* 64 MiB"):
        check_exact_fits(X, fraction=GRAM_FRACTION, n_components=10, placement=HOST)
    with pytest.raises(ValueError, match="KernelPCA's 8000 x 8000 Gram matrix"):
        check_exact_fits(X, fraction=GRAM_FRACTION, placement=HOST, estimator="KernelPCA")
