"""Readers facing broken and hostile files: every problem is a ValueError naming the file (and
the line, row or column), and what a file can cost in memory is bounded."""

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

import fastkpca.source.files as files
from fastkpca.cli import main
from fastkpca.persistence import load_with_info
from fastkpca.source.files import DEFAULT_MAX_LINE_LENGTH, open_data, read_data
from tests.conftest import least_traced_peak


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fastkpca: error: "), err
    return lines[0]


# --- repeated column names ----------------------------------------------------------------------


def test_csv_header_repeating_a_name_is_refused(tmp_path, capsys):
    """``a,a,b``: selecting by name would take the first ``a`` twice at transform."""
    path = tmp_path / "dup.csv"
    path.write_text("a,a,b\n1,2,3\n4,5,6\n7,8,9\n")
    with pytest.raises(ValueError, match=r"dup\.csv: the column name 'a' appears twice") as exc:
        read_data(path)
    assert "columns 1 and 2" in str(exc.value)
    with pytest.raises(ValueError, match="appears twice"):
        open_data(path, columns=[0, 2])  # by position too: the file's names stay ambiguous
    assert main(["fit", str(path), "-k", "1", "-o", str(tmp_path / "m.npz")]) == 1
    assert "dup.csv: the column name 'a' appears twice" in one_line_error(capsys)
    assert not (tmp_path / "m.npz").exists()


def test_transform_refuses_a_file_repeating_a_column_name(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 3))
    train = tmp_path / "train.csv"
    train.write_text("a,b,c\n" + "".join(",".join(map(repr, map(float, r))) + "\n" for r in X))
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), "-k", "2", "--gamma", "0.5", "-o", str(model)]) == 0
    test = tmp_path / "test.csv"
    test.write_text("a,a,c\n" + "".join(",".join(map(repr, map(float, r))) + "\n" for r in X))
    capsys.readouterr()
    assert main(["transform", str(model), str(test), "-o", str(tmp_path / "t.npy")]) == 1
    assert "test.csv: the column name 'a' appears twice" in one_line_error(capsys)


def test_parquet_with_two_columns_of_one_name_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.Table.from_arrays(
        [pa.array([1.0, 2.0]), pa.array([3.0, 4.0]), pa.array([5.0, 6.0])], names=["x", "x", "y"]
    )
    path = tmp_path / "dup.parquet"
    pq.write_table(table, path)
    with pytest.raises(ValueError, match=r"dup\.parquet: the column name 'x' appears twice"):
        read_data(path)


# --- one huge line ------------------------------------------------------------------------------


def _peak_while(fn):
    """(the error fn raises, the least tracemalloc peak in bytes of a few runs of fn)."""
    errors = []

    def run():
        with pytest.raises(Exception) as info:
            fn()
        errors.append(info.value)

    peak = least_traced_peak(run)
    return errors[0], peak


@pytest.mark.parametrize("name", ["one_line.csv", "one_line.csv.gz", "one_line.svm"])
def test_a_line_longer_than_the_limit_is_refused_in_bounded_memory(tmp_path, name):
    """A 4 MB line with a 256 KiB limit: refused after reading the limit, naming the line.

    Parsing the whole line would take some 10 to 30 times its 4 MB; reading up to the limit
    takes the limit's characters plus the reader's buffers, well under 4 times the limit.
    """
    limit = 2**18
    path = tmp_path / name
    if name.endswith(".svm"):
        text = "1 " + " ".join(f"{j + 1}:0.5" for j in range(500_000)) + "\n"
    else:
        text = "1.0,2.5\n" + "0.25," * 800_000 + "1\n"  # line 2 is the long one
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "wt") as f:
        f.write(text)
    exc, peak = _peak_while(lambda: read_data(path, max_line_length=limit))
    assert isinstance(exc, ValueError)
    line = 1 if name.endswith(".svm") else 2
    assert f"{name}: line {line} is longer than {limit} characters" in str(exc)
    assert peak < 4 * limit, peak


def test_default_line_limit_and_the_command_line_option(tmp_path, capsys):
    """The default limit holds without configuration; ``--max-line-length`` moves it."""
    path = tmp_path / "wide.csv"
    path.write_text("1," * (DEFAULT_MAX_LINE_LENGTH // 2) + "1\n")
    exc, peak = _peak_while(lambda: read_data(path))
    assert f"line 1 is longer than {DEFAULT_MAX_LINE_LENGTH} characters" in str(exc)
    assert peak < 4 * DEFAULT_MAX_LINE_LENGTH
    small = tmp_path / "small.csv"
    small.write_text("1,2,3\n4,5,6\n" + "7," * 100 + "8\n")
    out = str(tmp_path / "m.npz")
    assert main(["fit", str(small), "-k", "1", "--max-line-length", "100", "-o", out]) == 1
    assert "small.csv: line 3 is longer than 100 characters" in one_line_error(capsys)
    npy = tmp_path / "x.npy"
    np.save(npy, np.ones((3, 2)))
    assert main(["fit", str(npy), "-k", "1", "--max-line-length", "100", "-o", out]) == 1
    assert "--max-line-length applies to text and LIBSVM files" in one_line_error(capsys)


def test_long_accepted_line_parses_in_memory_proportional_to_it(tmp_path):
    """A 1.8 MB line of 2e5 fields is read at about 10 times its length (was 16 times)."""
    rng = np.random.default_rng(0)
    values = rng.random(200_000)
    line = ",".join(f"{v:.6f}" for v in values)
    path = tmp_path / "row.csv"
    path.write_text(line + "\n" + line + "\n")
    read = []
    peak = least_traced_peak(lambda: read.append(read_data(path)[0]))
    X = read[0]
    assert X.shape == (2, 200_000)
    np.testing.assert_allclose(X[0], values, atol=5e-7)  # 6 decimals written
    assert peak < 12 * len(line), peak / len(line)


# --- LIBSVM indices ---------------------------------------------------------------------------

_BAD_LIBSVM_LINES = {
    "beyond int64": ("1 99999999999999999999:1", "is too large"),
    "beyond int32": ("1 2147483648:1", "is too large"),
    "negative": ("1 -3:1", "negative feature index -3"),
    "not a number": ("1 x:1", "the feature index 'x' is not an integer"),
    "a float": ("1 1.5:1", "the feature index '1.5' is not an integer"),
    "repeated": ("1 2:1 2:3", "feature index 2 appears twice"),
    "descending": ("1 3:1 2:3", "must be ascending (2 after 3)"),
    "bad value": ("1 2:abc", "cannot read the value 'abc'"),
    "no colon": ("1 2", "expected index:value"),
}


@pytest.mark.parametrize("case", list(_BAD_LIBSVM_LINES))
def test_bad_libsvm_index_names_file_and_line(tmp_path, capsys, case):
    bad, message = _BAD_LIBSVM_LINES[case]
    path = tmp_path / "bad.svm"
    path.write_text(f"1 1:0.5 3:1\n# a comment\n{bad}\n")
    with pytest.raises(ValueError) as exc:
        read_data(path)
    text = str(exc.value)
    assert "bad.svm: line 3 (data row 2), column" in text and message in text
    assert main(["fit", str(path), "-k", "1", "-o", str(tmp_path / "m.npz")]) == 1
    assert "bad.svm: line 3 (data row 2)" in one_line_error(capsys)


def test_libsvm_index_zero_in_a_file_numbered_from_one(tmp_path):
    path = tmp_path / "z.svm"
    path.write_text("1 1:0.5 3:1\n1 0:2 2:1\n")
    with pytest.raises(ValueError, match=r"z\.svm: line 2 \(data row 2\): feature index 0"):
        read_data(path, zero_based=False)  # found by the scan
    with pytest.raises(ValueError, match=r"z\.svm: line 2 \(data row 2\), column 2 .*index 0"):
        read_data(path, zero_based=False, n_features=4)  # found by the parser


# --- LIBSVM numbering kept in the model ---------------------------------------------------------


def _write_libsvm(path, X, base):
    with open(path, "w") as f:
        for row in X:
            pairs = [f"{j + base}:{float(v)!r}" for j, v in enumerate(row) if v != 0]
            f.write("1 " + " ".join(pairs) + "\n")


def test_transform_reads_libsvm_with_the_numbering_of_the_training_file(tmp_path, capsys):
    """Fitted on a 0-based file; a test file whose rows lack feature 0 is read 0-based too
    (guessing again would shift it by a column)."""
    from fastkpca import ExactKPCA

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    train = tmp_path / "train.svm"
    _write_libsvm(train, X, base=0)
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), "-k", "2", "--gamma", "0.3", "-o", str(model)]) == 0
    assert load_with_info(model)[1]["data"]["libsvm_index_base"] == 0
    X_test = rng.standard_normal((10, 4))
    X_test[:, 0] = 0.0  # no index 0 anywhere in the test file
    test = tmp_path / "test.svm"
    _write_libsvm(test, X_test, base=0)
    out = tmp_path / "t.npy"
    capsys.readouterr()
    assert main(["transform", str(model), str(test), "-o", str(out)]) == 0
    assert capsys.readouterr().err == ""
    expected = ExactKPCA(n_components=2, gamma=0.3, random_state=0).fit(X).transform(X_test)
    # the same rows and arithmetic as the API fit; 1e-10 leaves room for float64 rounding
    # through the Gram eigenproblem (sign fixed the same way on both sides)
    np.testing.assert_allclose(np.load(out), expected, rtol=0, atol=1e-10)
    # the numbering a model records overrules a different one asked for
    argv = ["transform", str(model), str(test), "--libsvm-index-base", "1"]
    assert main([*argv, "-o", str(tmp_path / "x.npy")]) == 1
    assert "numbered its features from 0" in one_line_error(capsys)


def test_ambiguous_numbering_is_one_based_and_kept(tmp_path, capsys):
    """No index 0 at fit: LIBSVM's 1-based convention; a test file with index 0 is refused."""
    rng = np.random.default_rng(1)
    train = tmp_path / "train.svm"
    _write_libsvm(train, rng.standard_normal((30, 3)), base=1)
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), "-k", "2", "--gamma", "0.3", "-o", str(model)]) == 0
    assert load_with_info(model)[1]["data"]["libsvm_index_base"] == 1
    test = tmp_path / "test.svm"
    test.write_text("1 0:1.0 1:2.0\n")
    capsys.readouterr()
    assert main(["transform", str(model), str(test), "-o", str(tmp_path / "t.npy")]) == 1
    assert "test.svm: line 1 (data row 1): feature index 0" in one_line_error(capsys)
    # the numbering can be given at fit
    model0 = tmp_path / "m0.npz"
    argv = ["fit", str(train), "-k", "2", "--libsvm-index-base", "0", "-o", str(model0)]
    assert main(argv) == 0
    info = load_with_info(model0)
    assert info[1]["data"]["libsvm_index_base"] == 0 and info[0].n_features_in_ == 4


# --- every bad file is one line naming it -------------------------------------------------------


def _bad_files(folder):
    """name -> a few words every error about the file must contain."""
    np.save(folder / "objects.npy", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    np.save(folder / "vector.npy", np.arange(5.0))
    np.save(folder / "complex.npy", np.ones((3, 2), dtype=complex))
    np.save(folder / "short.npy", np.ones((100, 3)))
    data = (folder / "short.npy").read_bytes()
    (folder / "short.npy").write_bytes(data[:-100])
    (folder / "header.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': garbage\n")
    (folder / "ragged.csv").write_text("1,2,3\n4,5\n")
    (folder / "empty.csv").write_text("")
    (folder / "empty.npy").write_bytes(b"")
    (folder / "empty.svm").write_text("\n\n")
    (folder / "empty.parquet").write_bytes(b"")
    (folder / "binary.csv").write_bytes(b"\xff\xfe\x00\x01garbage\n1,2\n")
    with gzip.open(folder / "cut.csv.gz", "wt") as f:
        f.write("1.5,2.5\n" * 2000)
    data = (folder / "cut.csv.gz").read_bytes()
    (folder / "cut.csv.gz").write_bytes(data[: len(data) // 2])
    (folder / "folder.csv").mkdir()
    return {
        "objects.npy": "cannot read as .npy",
        "vector.npy": "expected a 2-D array",
        "complex.npy": "expected numeric data",
        "short.npy": "cannot read as .npy",
        "header.npy": "cannot read as .npy",
        "ragged.csv": "line 2 (data row 2) has 2 columns",
        "empty.csv": "empty",
        "empty.npy": "empty",
        "empty.svm": "empty",
        "empty.parquet": "cannot read as Parquet",
        "binary.csv": "not a readable text file",
        "cut.csv.gz": "truncated or damaged gzip file",
        "folder.csv": "is a directory",
    }


def test_every_bad_data_file_is_a_value_error_naming_it(tmp_path, capsys):
    cases = _bad_files(tmp_path)
    try:
        import pyarrow  # noqa: F401
    except ImportError:  # the Parquet reader says it needs pyarrow instead
        del cases["empty.parquet"]
    for name, words in cases.items():
        path = tmp_path / name
        with pytest.raises(ValueError) as exc:
            read_data(path)
        assert str(path) in str(exc.value) and words in str(exc.value), (name, exc.value)
        rc = main(["fit", str(path), "-k", "1", "-o", str(tmp_path / "m.npz")])
        line = one_line_error(capsys)
        assert rc == 1 and name in line and words in line, line


def test_a_pipe_as_data_is_refused_without_waiting(tmp_path):
    """Opening a pipe for reading waits for a writer: it must be refused before that."""
    pipe = tmp_path / "pipe.csv"
    os.mkfifo(pipe)
    r = subprocess.run(
        [sys.executable, "-m", "fastkpca", "fit", str(pipe), "-o", str(tmp_path / "m.npz")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "not a regular file" in r.stderr


def test_unreadable_file_is_a_value_error_naming_it(tmp_path, monkeypatch):
    """Permission denied (simulated: the tests may run as root, who reads every file)."""
    path = tmp_path / "secret.csv"
    path.write_text("1,2\n3,4\n")
    real_open = open

    def guarded_open(file, *args, **kwargs):
        if os.fspath(file) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(files, "open", guarded_open, raising=False)
    with pytest.raises(ValueError, match=r"secret\.csv: cannot read the file \(Permission denied"):
        read_data(path)


@pytest.mark.parametrize("option", ["--block-rows", "--libsvm-features", "--max-line-length"])
def test_command_line_sizes_must_be_positive(tmp_path, capsys, option):
    """A size of 0 is refused by the parser, naming the option (``--libsvm-features 0`` was
    silently ignored, ``--block-rows 0`` reported as the reader's ``block_rows``)."""
    path = tmp_path / "x.svm"
    path.write_text("1 1:0.5\n-1 2:1\n")
    with pytest.raises(SystemExit) as exc:
        main(["fit", str(path), option, "0", "-o", str(tmp_path / "m.npz")])
    assert exc.value.code == 2
    assert f"argument {option}: expected a positive integer, got '0'" in capsys.readouterr().err
