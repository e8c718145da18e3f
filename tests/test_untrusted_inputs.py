"""Bad and hostile inputs: each is refused on one line, costs little, and changes no file.

Every refusal through the command line is checked three ways: exit status != 0, one line
``fastkpca: error: ...`` on stderr, and the folder's files (names, mtimes, SHA-256) unchanged.
"""

import gzip
import hashlib
import json
import math
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fastkpca.cli import main
from fastkpca.persistence import load, load_with_info, save_model
from fastkpca.source.files import open_data, read_data
from tests.conftest import least_traced_peak


def snapshot(folder: Path) -> dict:
    """name -> (mtime_ns, sha256) of every file under ``folder`` (temporary files included)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(folder))] = (
                p.stat().st_mtime_ns,
                hashlib.sha256(p.read_bytes()).hexdigest(),
            )
    return out


def refused(capsys, folder, argv) -> str:
    """Run the command, check it is refused on one line and that no file changed; the line."""
    before = snapshot(folder)
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert rc != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fastkpca: error: "), err
    assert snapshot(folder) == before
    return lines[0]


@pytest.fixture
def files(tmp_path):
    """A labelled CSV with a header, the same data as .npy, and a model fitted on the CSV."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4))
    y = rng.integers(0, 2, size=60)
    csv = tmp_path / "train.csv"
    with open(csv, "w") as f:
        f.write("a,b,c,d,label\n")
        for row, label in zip(X, y, strict=True):
            f.write(",".join(repr(float(v)) for v in row) + f",{label}\n")
    npy = tmp_path / "train.npy"
    np.save(npy, X)
    model = tmp_path / "m.npz"
    argv = ["fit", csv, "-k", "2", "--gamma", "0.3", "--label-column", "label", "-o", model]
    assert main([str(a) for a in argv]) == 0
    return X, y, csv, npy, model


# --- output files -----------------------------------------------------------------------------


def test_failed_transform_leaves_existing_output_untouched(files, tmp_path, capsys):
    X, y, csv, _, model = files
    out = tmp_path / "t.npy"
    out.write_bytes(b"previous result")
    bad = tmp_path / "bad.csv"
    lines = csv.read_text().splitlines()
    lines[50] = lines[50].replace(lines[50].split(",")[1], "oops", 1)  # data row 50 is bad
    bad.write_text("\n".join(lines) + "\n")
    # blocks of 10 rows: four blocks are transformed and written before row 50 fails (--force:
    # the existing output may be replaced, but only by a complete one)
    argv = ["transform", model, bad, "--block-rows", "10", "-o", out, "--force"]
    line = refused(capsys, tmp_path, argv)
    assert "line 51 (data row 50)" in line and "'oops'" in line
    assert out.read_bytes() == b"previous result"
    # the same for fit: the existing model stays as it was
    line = refused(capsys, tmp_path, ["fit", bad, "--label-column", "label", "-o", model])
    assert "'oops'" in line


def test_transform_output_keeps_mode_and_replaces_atomically(files, tmp_path, capsys):
    _, _, csv, _, model = files
    out = tmp_path / "t.csv"
    out.write_text("old")
    os.chmod(out, 0o640)
    assert main(["transform", str(model), str(csv), "-o", str(out), "--force"]) == 0
    assert out.read_text().startswith("autokpca0,autokpca1\n")  # get_feature_names_out()
    assert (out.stat().st_mode & 0o777) == 0o640
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_output_naming_an_input_is_refused(files, tmp_path, capsys):
    _, _, csv, npy, model = files
    os.link(npy, tmp_path / "hardlink.npy")
    os.symlink(csv, tmp_path / "symlink.csv")
    cases = [
        (["fit", npy, "-k", "2", "-o", npy], "is the data file"),
        (["fit", npy, "-k", "2", "-o", tmp_path / "hardlink.npy"], "is the data file"),
        (["fit", csv, "--label-column", "label", "-o", tmp_path / "symlink.csv"], "data file"),
        (["transform", model, npy, "-o", npy], "is the data file"),
        (["transform", model, npy, "-o", tmp_path / "hardlink.npy"], "is the data file"),
        (["transform", model, csv, "-o", tmp_path / "symlink.csv"], "is the data file"),
        (["transform", model, csv, "-o", model], "is the model file"),
        (["transform", model, csv, "-o", tmp_path / "." / "m.npz"], "is the model file"),
    ]
    for argv, message in cases:
        assert message in refused(capsys, tmp_path, argv)


# --- column names -----------------------------------------------------------------------------


def test_model_records_column_names_and_label(files):
    _, _, _, _, model = files
    fitted, meta = load_with_info(model)
    assert list(fitted.feature_names_in_) == ["a", "b", "c", "d"]
    assert meta["data"] == {
        "columns": ["a", "b", "c", "d"],
        "label_column": "label",
        "format": "text",
    }


def test_swapped_columns_are_reordered_by_name(files, tmp_path, capsys):
    X, y, csv, _, model = files
    swapped = tmp_path / "swapped.csv"
    with open(swapped, "w") as f:
        f.write("label,d,b,a,c\n")
        for row, label in zip(X, y, strict=True):
            f.write(f"{label}," + ",".join(repr(float(v)) for v in row[[3, 1, 0, 2]]) + "\n")
    assert main(["transform", str(model), str(csv), "-o", str(tmp_path / "t1.npy")]) == 0
    assert main(["transform", str(model), str(swapped), "-o", str(tmp_path / "t2.npy")]) == 0
    # the same rows in the same column order reach the model (a swap would change the
    # projections at O(1)); 1e-12 leaves room only for BLAS taking another path on a copy
    np.testing.assert_allclose(
        np.load(tmp_path / "t2.npy"), np.load(tmp_path / "t1.npy"), rtol=1e-12, atol=1e-14
    )


def test_missing_or_misordered_columns_are_refused(files, tmp_path, capsys):
    X, _, _, _, model = files
    other = tmp_path / "other.csv"
    np.savetxt(other, X, delimiter=",", header="a,b,x,d", comments="")
    line = refused(capsys, tmp_path, ["transform", model, other, "-o", tmp_path / "t.npy"])
    assert "has no column(s) 'c'" in line
    np.savetxt(other, X, delimiter=",", header="a,b,c,d", comments="")
    line = refused(
        capsys,
        tmp_path,
        ["transform", model, other, "--columns", "b,a,c,d", "-o", tmp_path / "t.npy"],
    )
    assert "--columns selects b, a, c, d, but the model was fitted on columns a, b, c, d" in line


def test_parquet_and_dataframe_columns_by_name(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from fastkpca import ExactKPCA

    X = np.random.default_rng(1).standard_normal((40, 3))
    pq.write_table(pa.table({"u": X[:, 0], "v": X[:, 1], "w": X[:, 2]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"w": X[:, 2], "u": X[:, 0], "v": X[:, 1]}), tmp_path / "b.parquet")
    model = tmp_path / "m.npz"
    assert main(["fit", str(tmp_path / "a.parquet"), "-k", "2", "-o", str(model)]) == 0
    assert list(load(model).feature_names_in_) == ["u", "v", "w"]
    for name in ("a", "b"):
        out = str(tmp_path / f"{name}.npy")
        assert main(["transform", str(model), str(tmp_path / f"{name}.parquet"), "-o", out]) == 0
    # the same floats in the model's column order (see test_swapped_columns_are_reordered_by_name)
    np.testing.assert_allclose(
        np.load(tmp_path / "b.npy"), np.load(tmp_path / "a.npy"), rtol=1e-12, atol=1e-14
    )
    # a data frame (here a pyarrow table): scikit-learn records the names, the file keeps them,
    # and the loaded model refuses a frame whose columns are swapped
    fitted = ExactKPCA(n_components=2, random_state=0).fit(pa.table({"p": X[:, 0], "q": X[:, 1]}))
    save_model(fitted, tmp_path / "df.npz")
    loaded = load(tmp_path / "df.npz")
    assert list(loaded.feature_names_in_) == ["p", "q"]
    with pytest.raises(ValueError, match="feature names"):
        loaded.transform(pa.table({"q": X[:, 1], "p": X[:, 0]}))


def test_headerless_file_for_a_named_model_goes_by_position_with_a_note(files, tmp_path, capsys):
    X, _, _, npy, model = files
    assert main(["transform", str(model), str(npy), "-o", str(tmp_path / "t.npy")]) == 0
    err = capsys.readouterr().err
    assert "note: " in err and "taken by position" in err


# --- bounded cost -----------------------------------------------------------------------------


def test_libsvm_huge_index_in_a_tiny_file(tmp_path, capsys):
    path = tmp_path / "tiny.svm"
    path.write_bytes(b"1 1:0.5 2:0.25 3:1.0 2000000000:1.5\n")
    assert path.stat().st_size < 40
    with pytest.raises(ValueError):  # once untraced: imports (sklearn's parser) are not counted
        open_data(path)

    def refuse():
        with pytest.raises(ValueError, match="feature index 2000000000 is far beyond"):
            open_data(path)

    # before: a 2e9-entry list of column numbers (> 1 GB, minutes); now the scan's few objects
    assert least_traced_peak(refuse) < 256 * 2**10
    line = refused(capsys, tmp_path, ["fit", path, "-o", tmp_path / "m.npz"])
    assert "tiny.svm: feature index 2000000000" in line


def test_libsvm_declared_width_allows_a_wide_file(tmp_path, capsys):
    path = tmp_path / "wide.svm"
    path.write_bytes(b"1 1:0.5 5000000:1.5\n-1 2:1\n")
    reader = open_data(path, max_features=5_000_000)
    assert reader.n_features == 5_000_000
    X = next(iter(reader))
    assert X.shape == (2, 5_000_000) and X.nnz == 3  # CSR: nothing of the width's size
    with pytest.raises(ValueError, match="beyond the declared width of 4999999 features"):
        open_data(path, max_features=4_999_999)
    # on the command line: --libsvm-features declares the width (here just above 2**20)
    path.write_bytes(b"1 1:0.5 1100000:1.5\n-1 2:1\n1 3:2\n")
    wide = tmp_path / "wide.npz"
    argv = ["fit", path, "-k", "1", "--gamma", "0.5"]
    assert "far beyond" in refused(capsys, tmp_path, [*argv, "-o", wide])
    assert main([str(a) for a in [*argv, "--libsvm-features", 1_100_000, "-o", wide]]) == 0
    assert load(wide).n_features_in_ == 1_100_000


def _zip_member_of_zeros(zout, name, dtype, shape, chunk=2**22):
    """Write an .npy member of zeros, deflated, in chunks (no array of its size in memory)."""
    header = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": tuple(shape)}
    with zout.open(name, "w", force_zip64=True) as f:
        np.lib.format.write_array_header_1_0(f, header)
        left = math.prod(shape) * np.dtype(dtype).itemsize
        zeros = bytes(chunk)
        while left:
            n = min(left, chunk)
            f.write(zeros[:n])
            left -= n


def _digest_of_zeros(dtype, shape, chunk=2**22):
    h = hashlib.sha256(f"{np.dtype(dtype).str}|{tuple(shape)}|".encode())
    left = math.prod(shape) * np.dtype(dtype).itemsize
    zeros = bytes(chunk)
    while left:
        n = min(left, chunk)
        h.update(zeros[:n])
        left -= n
    return h.hexdigest()


def _bomb(model_path, out, *, rows, consistent):
    """``model_path`` with X_fit_ replaced by ``rows`` x 5 zeros, deflated (~1000:1).

    ``consistent``: also declare that shape in the metadata with matching checksums (a forger
    who recomputes them); otherwise the metadata still declares the small original.
    """
    with zipfile.ZipFile(model_path) as zin:
        meta = json.loads(str(np.load(zin.open("__fastkpca__.npy"))[()]))
        key = meta["fitted"]["X_fit_"]["key"]
        shape = (rows, 5)
        if consistent:
            meta["arrays"][key].update(shape=list(shape), sha256=_digest_of_zeros("<f8", shape))
        text = json.dumps(meta, sort_keys=True)
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                if info.filename == f"{key}.npy":
                    _zip_member_of_zeros(zout, info.filename, "<f8", shape)
                elif info.filename == "__fastkpca__.npy":
                    with zout.open(info.filename, "w") as f:
                        np.lib.format.write_array(f, np.array(text))
                elif info.filename == "__checksum__.npy":
                    digest = hashlib.sha256(text.encode()).hexdigest()
                    with zout.open(info.filename, "w") as f:
                        np.lib.format.write_array(f, np.array(digest))
                else:
                    zout.writestr(info.filename, zin.read(info))


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    from fastkpca import ExactKPCA

    X = np.random.default_rng(0).standard_normal((80, 5))
    path = tmp_path_factory.mktemp("model") / "m.npz"
    ExactKPCA(n_components=2, gamma=0.3, random_state=0).fit(X).save(path)
    return path


@pytest.mark.parametrize(
    "consistent,message",
    [
        (False, "the metadata declares float64 \\(80, 5\\)"),
        (True, "expand to 671\\d{5} bytes from \\d+ bytes on disk"),
    ],
)
def test_compressed_model_bomb_is_refused_before_decompression(
    small_model, tmp_path, capsys, consistent, message
):
    bomb = tmp_path / "bomb.npz"
    _bomb(small_model, bomb, rows=2**26 // 40, consistent=consistent)  # 64 MiB of zeros
    assert bomb.stat().st_size < 200_000  # a ~1000-fold expansion

    def refuse():
        with pytest.raises(ValueError, match=message):
            load(bomb)

    # only the metadata and the .npy headers were read: nothing of the 64 MiB member
    assert least_traced_peak(refuse) < 4 * 2**20
    refused(capsys, tmp_path, ["transform", bomb, small_model, "-o", tmp_path / "t.npy"])


def _rewrite_fitted(model_path, out, update):
    with zipfile.ZipFile(model_path) as zin:
        meta = json.loads(str(np.load(zin.open("__fastkpca__.npy"))[()]))
        update(meta["fitted"])
        text = json.dumps(meta, sort_keys=True)
        with zipfile.ZipFile(out, "w") as zout:
            for info in zin.infolist():
                if info.filename == "__fastkpca__.npy":
                    with zout.open(info.filename, "w") as f:
                        np.lib.format.write_array(f, np.array(text))
                elif info.filename == "__checksum__.npy":
                    with zout.open(info.filename, "w") as f:
                        np.lib.format.write_array(
                            f, np.array(hashlib.sha256(text.encode()).hexdigest())
                        )
                else:
                    zout.writestr(info.filename, zin.read(info))


@pytest.mark.parametrize(
    "name", ["__dict__", "__class__", "transform", "_transform_rows", "n_components", "evil_"]
)
def test_fitted_attribute_names_are_a_whitelist(small_model, tmp_path, capsys, name):
    crafted = tmp_path / "crafted.npz"
    value = {"kind": "dict", "items": {"transform": "pwned"}} if name == "__dict__" else "pwned"
    _rewrite_fitted(small_model, crafted, lambda fitted: fitted.update({name: value}))
    with pytest.raises(ValueError, match=f"sets '{name}', not a fitted attribute of ExactKPCA"):
        load(crafted)
    line = refused(capsys, tmp_path, ["transform", crafted, small_model, "-o", tmp_path / "t.npy"])
    assert f"sets '{name}', not a fitted attribute" in line


# --- small command-line items -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "1", "-5"])
def test_evaluate_max_samples_must_be_at_least_two(files, tmp_path, capsys, value):
    _, _, csv, _, model = files
    line = refused(capsys, tmp_path, ["evaluate", model, csv, "--max-samples", value])
    assert f"--max-samples must be at least 2, got {value}" in line


def test_truncated_gzip_names_the_file(tmp_path, capsys):
    rng = np.random.default_rng(2)
    text = "\n".join(",".join(f"{v:.6f}" for v in row) for row in rng.random((3000, 5))) + "\n"
    data = gzip.compress(text.encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.csv\.gz: truncated or damaged gzip file"):
        read_data(path)
    line = refused(capsys, tmp_path, ["fit", path, "-o", tmp_path / "m.npz"])
    assert "cut.csv.gz: truncated or damaged gzip file" in line
    svm = tmp_path / "cut.svm.gz"
    lines = "".join(f"1 1:{v:.6f} 2:{v:.3f}\n" for v in rng.random(3000)).encode()
    svm.write_bytes(gzip.compress(lines)[:-40])
    with pytest.raises(ValueError, match=r"cut\.svm\.gz: truncated or damaged gzip file"):
        read_data(svm)


def test_numeric_header_is_not_a_data_row(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((20, 4))
    path = tmp_path / "pandas.csv"
    np.savetxt(path, X, delimiter=",", header="0,1,2,3", comments="")  # pandas' default labels
    reader = open_data(path)
    assert reader.has_header and reader.column_names == ["0", "1", "2", "3"]
    # the body round-trips through %.18e text: exact
    np.testing.assert_array_equal(reader.read()[0], X)
    # integer data that merely starts with a small counting row stays data
    path.write_text("1,2,3\n4,5,6\n")
    assert not open_data(path).has_header and read_data(path)[0].shape == (2, 3)
    # a long counting run over integer data (784 pixel columns) is a header
    path.write_text(",".join(map(str, range(784))) + "\n" + ",".join(["0"] * 784) + "\n")
    assert open_data(path).has_header


def test_float32_npy_stays_float32_through_fit_and_transform(tmp_path, capsys):
    X = np.random.default_rng(4).standard_normal((50, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    model = tmp_path / "m.npz"
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2", "-o", str(model)]) == 0
    assert load(model).X_fit_.dtype == np.float32
    out = tmp_path / "t.npy"
    assert main(["transform", str(model), str(tmp_path / "x.npy"), "-o", str(out)]) == 0
    assert np.load(out).dtype == np.float32
    # float64 is still there when asked for
    assert (
        main(["fit", str(tmp_path / "x.npy"), "-k", "2", "--dtype", "float64", "-o", str(model)])
        == 0
    )
    assert load(model).X_fit_.dtype == np.float64


def test_format_npy_on_a_csv_does_not_suggest_pickle(files, tmp_path, capsys):
    _, _, csv, _, _ = files
    line = refused(capsys, tmp_path, ["fit", csv, "--format", "npy", "-o", tmp_path / "x.npz"])
    assert "not a .npy file" in line and "pickle" not in line


def test_headerless_label_column_is_recorded_and_reused(tmp_path, capsys):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((40, 3))
    data = np.column_stack([X, rng.integers(0, 2, size=40)])
    path = tmp_path / "plain.csv"
    np.savetxt(path, data, delimiter=",")
    model = tmp_path / "m.npz"
    assert main(["fit", str(path), "-k", "2", "--label-column", "-1", "-o", str(model)]) == 0
    assert load_with_info(model)[1]["data"] == {"label_column": 3, "format": "text"}
    # without --label-column: DATA is one column wider than the model, its column 4 the label
    assert main(["transform", str(model), str(path), "-o", str(tmp_path / "a.npy")]) == 0
    np.save(tmp_path / "x.npy", X)
    assert (
        main(["transform", str(model), str(tmp_path / "x.npy"), "-o", str(tmp_path / "b.npy")]) == 0
    )
    # %.18e text round-trips float64: the same rows reach the model (tolerance: BLAS paths)
    np.testing.assert_allclose(
        np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"), rtol=1e-12, atol=1e-14
    )
