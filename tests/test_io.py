"""Streaming file readers: every format, re-iteration, column selection, malformed files."""

import gzip
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file

from fastkpca.source.files import detect_format, open_data, read_data


@pytest.fixture
def data(rng):
    X = rng.standard_normal((50, 4))
    y = rng.integers(0, 3, size=50).astype(np.float64)
    return X, y


def write_csv(path, X, y=None, *, header=None, delimiter=",", opener=open):
    with opener(path, "wt") as f:
        if header:
            f.write(delimiter.join(header) + "\n")
        for i, row in enumerate(X):
            cells = [repr(float(v)) for v in row]  # repr round-trips float64 exactly
            if y is not None:
                cells.append(repr(float(y[i])))
            f.write(delimiter.join(cells) + "\n")


def blocks_of(reader):
    return [b for b in reader]


# --- npy -----------------------------------------------------------------------------------------


def test_npy_blocks_reiterable_and_exact(tmp_path, data):
    X, _ = data
    path = tmp_path / "x.npy"
    np.save(path, X)
    reader = open_data(path, block_rows=16)
    assert reader.format == "npy" and reader.n_features == 4 and reader.n_samples == 50
    first = blocks_of(reader)
    assert [b.shape[0] for b in first] == [16, 16, 16, 2]
    np.testing.assert_array_equal(np.concatenate(first), X)
    # a second iteration starts again from the top (two-pass methods rely on it)
    np.testing.assert_array_equal(np.concatenate(blocks_of(reader)), X)
    Xr, yr = read_data(path)
    np.testing.assert_array_equal(Xr, X)
    assert yr is None


def test_npy_columns_label_and_float32(tmp_path, data):
    X, y = data
    path = tmp_path / "xy.npy"
    np.save(path, np.column_stack([X, y]))
    Xr, yr = read_data(path, label_column=-1, dtype=np.float32)
    assert Xr.dtype == np.float32 and Xr.shape == (50, 4)
    np.testing.assert_array_equal(Xr, X.astype(np.float32))
    np.testing.assert_array_equal(yr, y)
    Xc, _ = read_data(path, columns=[2, 0])
    np.testing.assert_array_equal(Xc, X[:, [2, 0]])


def test_npy_malformed(tmp_path):
    bad = tmp_path / "nan.npy"
    A = np.ones((10, 3))
    A[6, 1] = np.nan
    np.save(bad, A)
    with pytest.raises(ValueError, match=r"nan\.npy: row 7, column 2: NaN"):
        read_data(bad)
    A[6, 1] = np.inf
    np.save(bad, A)
    with pytest.raises(ValueError, match=r"row 7, column 2: infinity"):
        read_data(bad)
    one_d = tmp_path / "v.npy"
    np.save(one_d, np.ones(5))
    with pytest.raises(ValueError, match="expected a 2-D array"):
        open_data(one_d)
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        open_data(empty)
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([[1, "a"]], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"obj\.npy"):
        open_data(obj)


def test_missing_file_names_path(tmp_path):
    path = tmp_path / "nowhere" / "x.csv"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        open_data(path)
    with pytest.raises(FileNotFoundError, match="x.npy"):
        read_data(tmp_path / "x.npy")


# --- delimited text ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,delimiter,gz",
    [("d.csv", ",", False), ("d.csv.gz", ",", True), ("d.tsv", "\t", False), ("d.txt", " ", False)],
)
def test_text_formats_roundtrip(tmp_path, data, name, delimiter, gz):
    X, y = data
    path = tmp_path / name
    header = ["a", "b", "c", "d", "label"]
    write_csv(path, X, y, header=header, delimiter=delimiter, opener=gzip.open if gz else open)
    reader = open_data(path, label_column="label", block_rows=7)
    assert reader.format == "text" and reader.has_header
    assert reader.feature_names == ["a", "b", "c", "d"]
    Xr, yr = reader.read()
    np.testing.assert_array_equal(Xr, X)  # repr-written floats parse back exactly
    np.testing.assert_array_equal(yr, y)
    assert reader.n_samples == 50  # known after one full pass
    pairs = list(reader.iter_labeled())
    assert [p[0].shape[0] for p in pairs] == [7] * 7 + [1]
    Xs, _ = read_data(path, columns=["d", "a"])
    np.testing.assert_array_equal(Xs, X[:, [3, 0]])


def test_text_without_header_comments_blank_lines(tmp_path):
    path = tmp_path / "german.data-numeric"
    path.write_text("# comment\n   1   6   4\n\n   2  48   2\n")
    reader = open_data(path)
    assert reader.delimiter is None and not reader.has_header
    X, y = reader.read()
    np.testing.assert_array_equal(X, [[1, 6, 4], [2, 48, 2]])
    assert y is None
    assert reader.count_rows() == 2
    # a forced header makes the first data line the names
    X2, _ = read_data(path, header=True)
    np.testing.assert_array_equal(X2, [[2, 48, 2]])


def test_text_string_labels(tmp_path):
    path = tmp_path / "iris.csv"
    path.write_text("x,y,species\n1.0,2.0,setosa\n3.0,4.0,virginica\n")
    X, y = read_data(path, label_column="species")
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    assert list(y) == ["setosa", "virginica"]


def test_text_bad_cell_names_file_row_column(tmp_path):
    path = tmp_path / "bad.csv"
    # line 1 header, line 2 comment, line 3 row 1, line 4 row 2, line 5 row 3 (bad cell)
    path.write_text("a,b,c\n# note\n1,2,3\n4,5,6\n7,oops,9\n")
    with pytest.raises(ValueError) as exc:
        read_data(path)
    msg = str(exc.value)
    assert "bad.csv" in msg and "line 5" in msg and "data row 3" in msg
    assert "column 2 ('b')" in msg and "'oops'" in msg
    # the error surfaces in the block that holds the bad row, also when streaming
    reader = open_data(path, block_rows=2)
    it = iter(reader)
    np.testing.assert_array_equal(next(it), [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError, match="line 5"):
        next(it)


def test_text_empty_cell_and_nan(tmp_path):
    path = tmp_path / "holes.csv"
    path.write_text("1,2\n3,\n")
    with pytest.raises(ValueError, match=r"holes\.csv: line 2 \(data row 2\), column 2: cannot"):
        read_data(path)
    path.write_text("1,2\nnan,4\n")
    with pytest.raises(ValueError, match=r"line 2 \(data row 2\), column 1: NaN"):
        read_data(path)
    X, _ = read_data(path, check_finite=False)
    assert np.isnan(X[1, 0])


def test_text_ragged_rows(tmp_path):
    path = tmp_path / "ragged.csv"
    path.write_text("1,2,3\n4,5,6\n7,8\n")
    with pytest.raises(
        ValueError,
        match=r"ragged\.csv: line 3 \(data row 3\) has 2 columns, "
        r"expected 3",
    ):
        read_data(path)
    path.write_text("1,2,3\n4,5,6,7\n")
    with pytest.raises(ValueError, match="has 4 columns, expected 3"):
        read_data(path, columns=[0])  # also when the extra column is not selected


def test_text_empty_and_header_only(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty\.csv: the file is empty"):
        open_data(empty)
    blank = tmp_path / "blank.csv.gz"
    with gzip.open(blank, "wt") as f:
        f.write("\n\n# only a comment\n")
    with pytest.raises(ValueError, match="empty"):
        open_data(blank)
    head = tmp_path / "head.csv"
    head.write_text("a,b\n")
    with pytest.raises(ValueError, match="no data rows"):
        open_data(head)


def test_column_errors(tmp_path, data):
    X, y = data
    path = tmp_path / "d.csv"
    write_csv(path, X, y, header=["a", "b", "c", "d", "label"])
    with pytest.raises(ValueError, match="no column named 'zz'"):
        open_data(path, label_column="zz")
    with pytest.raises(ValueError, match="out of range"):
        open_data(path, columns=[7])
    with pytest.raises(ValueError, match="also selected"):
        open_data(path, columns=["a", "label"], label_column="label")
    plain = tmp_path / "plain.csv"
    write_csv(plain, X)
    with pytest.raises(ValueError, match="no header"):
        open_data(plain, label_column="label")


# --- parquet -------------------------------------------------------------------------------------

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def test_parquet_roundtrip(tmp_path, data):
    X, y = data
    table = pa.table(
        {
            "a": X[:, 0],
            "b": X[:, 1],
            "c": X[:, 2].astype(np.float32),
            "d": (X[:, 3] * 100).astype(np.int64),
            "label": y.astype(np.int64),
        }
    )
    path = tmp_path / "d.parquet"
    pq.write_table(table, path, row_group_size=20)
    reader = open_data(path, label_column="label", block_rows=16)
    assert reader.format == "parquet" and reader.n_samples == 50 and reader.n_features == 4
    Xr, yr = read_data(path, label_column="label", block_rows=16)
    expected = np.column_stack(
        [X[:, 0], X[:, 1], X[:, 2].astype(np.float32), (X[:, 3] * 100).astype(np.int64)]
    )
    np.testing.assert_array_equal(Xr, expected)
    np.testing.assert_array_equal(yr, y)
    np.testing.assert_array_equal(np.concatenate(list(reader)), expected)
    Xc, _ = read_data(path, columns=["b"])
    np.testing.assert_array_equal(Xc[:, 0], X[:, 1])


def test_parquet_malformed(tmp_path):
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"a": [1.0, 2.0, 3.0], "b": [1.0, None, 3.0]}), path)
    with pytest.raises(ValueError, match=r"nulls\.parquet: row 2, column 2 \('b'\): missing"):
        read_data(path)
    strings = tmp_path / "strings.parquet"
    pq.write_table(pa.table({"a": [1.0, 2.0], "s": ["x", "y"]}), strings)
    with pytest.raises(ValueError, match=r"column 2 \('s'\) has type string"):
        open_data(strings)
    X, y = read_data(strings, label_column="s")  # a string column is fine as labels
    assert list(y) == ["x", "y"]
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 this is not really parquet")
    with pytest.raises(ValueError, match="cannot read as Parquet"):
        open_data(broken)


def test_parquet_without_pyarrow(tmp_path, monkeypatch):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"a": [1.0]}), path)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pip install 'fastkpca\[parquet\]'"):
        open_data(path)


# --- LIBSVM --------------------------------------------------------------------------------------


@pytest.fixture
def sparse_data(rng):
    X = sp.random(40, 9, density=0.3, format="csr", random_state=0)
    X.data = np.round(X.data, 3)
    y = rng.choice([-1.0, 1.0], size=40)
    return X, y


@pytest.mark.parametrize("zero_based", [False, True])
def test_libsvm_roundtrip_and_blocks(tmp_path, sparse_data, zero_based):
    X, y = sparse_data
    path = tmp_path / "d.svm"
    dump_svmlight_file(X, y, str(path), zero_based=zero_based)
    # width and index base are found by one scan (the last column may be empty: pass n_features)
    reader = open_data(path, block_rows=16, n_features=9, zero_based=zero_based)
    blocks = list(reader)
    assert all(sp.issparse(b) and b.shape[1] == 9 for b in blocks)
    assert [b.shape[0] for b in blocks] == [16, 16, 8]
    Xr, yr = read_data(path, n_features=9, zero_based=zero_based)
    assert sp.issparse(Xr)
    np.testing.assert_array_equal(Xr.toarray(), X.toarray())
    np.testing.assert_array_equal(yr, y)
    Xa, _ = read_data(path)  # auto: scanned width and base
    width = X.indices.max() + 1
    np.testing.assert_array_equal(Xa.toarray(), X.toarray()[:, :width])


def test_libsvm_detected_by_content_and_gzip(tmp_path, sparse_data):
    X, y = sparse_data
    raw = tmp_path / "a9a.t"
    dump_svmlight_file(X, y, str(raw), zero_based=False)
    assert detect_format(raw) == "libsvm"
    gz = tmp_path / "a9a.t.gz"
    gz.write_bytes(gzip.compress(raw.read_bytes()))
    Xr, yr = read_data(gz, n_features=9)
    np.testing.assert_array_equal(Xr.toarray(), X.toarray())
    csv = tmp_path / "table.data"
    csv.write_text("1,2\n3,4\n")
    assert detect_format(csv) == "text"


def test_libsvm_malformed(tmp_path):
    path = tmp_path / "bad.svm"
    path.write_text("1 1:0.5 3:1\n-1 2:1\n1 2:abc\n")
    with pytest.raises(ValueError) as exc:
        read_data(path, n_features=3)
    msg = str(exc.value)
    assert "bad.svm" in msg and "line 3 (data row 3)" in msg and "column 2" in msg
    assert "2:abc" in msg
    path.write_text("1 1:0.5\nyes 2:1\n")
    with pytest.raises(ValueError, match=r"line 2 \(data row 2\), column 1 \(label\)"):
        read_data(path, n_features=3)
    path.write_text("1 1:0.5\n1 7:1\n")
    with pytest.raises(ValueError, match=r"line 2 \(data row 2\).*n_features"):
        read_data(path, n_features=3)
    path.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        open_data(path)
    with pytest.raises(ValueError, match="label_column does not apply"):
        open_data(tmp_path / "bad.svm", label_column=0)


# --- readers feed the estimators -----------------------------------------------------------------


def _try_import(name):
    import fastkpca.decomposition as dec

    try:
        return getattr(dec, name)
    except (ImportError, AttributeError):
        pytest.skip(f"{name} is not available yet")


def test_reader_fits_one_pass_estimator_like_the_array(tmp_path, rng):
    """Fitting on a reader of the file equals fitting on the array (same row blocks)."""
    cls = _try_import("RandomFeatureKPCA")
    X = rng.standard_normal((300, 5))
    path = tmp_path / "x.npy"
    np.save(path, X)
    params = dict(n_components=3, n_random_features=64, gamma=0.2, random_state=0)
    from_array = cls(**params).fit(X)
    from_file = cls(**params).fit(open_data(path))
    np.testing.assert_allclose(
        from_file.transform(X), from_array.transform(X), rtol=1e-10, atol=1e-12
    )


def test_reader_feeds_two_pass_method(tmp_path, rng):
    """A reader is re-iterable, so a method that walks the data twice sees the same rows."""
    X = rng.standard_normal((100, 3))
    path = tmp_path / "x.csv"
    write_csv(path, X)
    reader = open_data(path, block_rows=30)
    passes = [np.concatenate(list(reader)) for _ in range(2)]
    np.testing.assert_array_equal(passes[0], X)
    np.testing.assert_array_equal(passes[1], X)


def test_options_must_fit_the_format(tmp_path, data):
    X, _ = data
    np.save(tmp_path / "x.npy", X)
    with pytest.raises(ValueError, match="n_features do not apply to npy files"):
        open_data(tmp_path / "x.npy", n_features=4)
    with pytest.raises(ValueError, match="unknown format 'xlsx'"):
        open_data(tmp_path / "x.npy", format="xlsx")
    with pytest.raises(ValueError, match="block_rows must be a positive integer"):
        open_data(tmp_path / "x.npy", block_rows=0)


def test_public_facade_reexports_the_readers_and_model_files():
    """``fastkpca.io`` is a facade: its names are the objects of source.files and persistence."""
    import fastkpca
    import fastkpca.io
    import fastkpca.persistence
    import fastkpca.source.files

    for name in fastkpca.io.__all__:
        owner = (
            fastkpca.source.files if name in fastkpca.source.files.__all__ else fastkpca.persistence
        )
        assert getattr(fastkpca.io, name) is getattr(owner, name), name
    assert set(fastkpca.io.__all__) == set(fastkpca.source.files.__all__) | set(
        fastkpca.persistence.__all__
    )
    assert fastkpca.load is fastkpca.persistence.load


# --- pyarrow's CSV reader, where installed, reads as the text reader does -----------------------


def _both_ways(path, **kwargs):
    """(blocks read with pyarrow where it applies, blocks read by the text reader alone)."""
    from fastkpca.source.files import TextReader

    fast = open_data(path, **kwargs)
    slow = open_data(path, **kwargs)
    slow._fast_csv_applies = lambda: False
    assert isinstance(fast, TextReader)
    return fast, slow


@pytest.mark.parametrize("case", ["plain", "gzip", "label", "float32", "comment", "bad", "nan"])
def test_fast_csv_reads_what_the_text_reader_reads(tmp_path, case):
    pytest.importorskip("pyarrow")
    import gzip

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2500, 3))
    lines = ["a,b,c,y"] + [
        f"{r[0]:.17g},{r[1]:.17g},{r[2]:.17g},{'cat' if i % 2 else 'dog'}" for i, r in enumerate(X)
    ]
    if case == "comment":
        lines.insert(1700, "# a comment line")
    if case == "bad":
        lines[2001] = "1.0,x,2.0,dog"
    if case == "nan":
        lines[2001] = "1.0,nan,2.0,dog"
    path = tmp_path / ("d.csv.gz" if case == "gzip" else "d.csv")
    text = "\n".join(lines) + "\n"
    if case == "gzip":
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    kwargs = {"block_rows": 1000, "label_column": "y"}
    if case == "float32":
        kwargs["dtype"] = np.float32
    fast, slow = _both_ways(path, **kwargs)
    assert fast._fast_csv_applies()
    if case in ("bad", "nan"):
        messages = []
        for reader in (fast, slow):
            with pytest.raises(ValueError) as err:
                reader.read()
            messages.append(str(err.value))
        assert messages[0] == messages[1] and "line 2002" in messages[0]
        return
    (Xf, yf), (Xs, ys) = fast.read(), slow.read()
    assert Xf.dtype == Xs.dtype and Xf.shape == Xs.shape == (2500, 3)
    np.testing.assert_array_equal(Xf, Xs)
    np.testing.assert_array_equal(yf, ys)
    assert fast.n_samples == slow.n_samples == 2500
    assert [b.shape[0] for b in fast] == [1000, 1000, 500]
    assert fast.bytes_read == fast.size_bytes
