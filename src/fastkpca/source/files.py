"""Streaming readers of data files: row blocks from npy, delimited text, Parquet and LIBSVM.

:func:`open_data` returns a re-iterable reader over row blocks of one file (each ``iter()``
starts again from the top), so a file larger than memory can be passed straight to ``fit``;
:func:`read_data` reads the whole file.  Formats: ``npy`` (``.npy``, 2-D numeric; header by
``numpy.load(mmap_mode="r")``), ``text`` (``.csv``, ``.tsv``, ``.txt``, ``.data``, optionally
gzipped; ``numpy.loadtxt`` on chunks of lines, delimiter and header detected), ``parquet``
(``.parquet``, ``.pq``; ``pyarrow.parquet`` record batches, extra ``fastkpca[parquet]``) and
``libsvm`` (``.svm``, ``.libsvm``, ``.svmlight`` or lines ``y i:v ...``; scipy.sparse CSR
blocks).  Rows and columns in messages are 1-based.  A line longer than ``max_line_length``
(:data:`DEFAULT_MAX_LINE_LENGTH`) is refused after reading that many characters; every damaged
input is a ``ValueError`` naming the file (and the line, row or column).
"""

from __future__ import annotations

import gzip
import io as _io
import itertools
import numbers
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._utils import DEFAULT_BLOCK_ROWS
from ..execution.elementwise import nonfinite

__all__ = [
    "open_data",
    "read_data",
    "detect_format",
    "DataReader",
    "NpyReader",
    "TextReader",
    "ParquetReader",
    "LibsvmReader",
    "FORMATS",
    "DEFAULT_MAX_LINE_LENGTH",
    "MAX_LIBSVM_INDEX",
]

_LIBSVM_SUFFIXES = {".svm", ".libsvm", ".svmlight"}
_PARQUET_SUFFIXES = {".parquet", ".pq"}
FORMATS = ("npy", "text", "parquet", "libsvm")
_FORMAT_ALIASES = {"csv": "text", "tsv": "text", "svmlight": "libsvm", "pq": "parquet"}
_GZIP_MAGIC = b"\x1f\x8b"

#: The widest row a text line may describe by default: fields of a delimited text file, or
#: ``index:value`` pairs of a LIBSVM line (far beyond real data sets: MNIST has 784 columns, a
#: wide gene-expression table some 6e4, a LIBSVM row of news20 or url a few thousand pairs).
MAX_LINE_FIELDS = 2**18
#: Characters per field allowed for by the default line length (17 significant digits, sign,
#: exponent, a LIBSVM index and separators fit in 32).
MAX_FIELD_WIDTH = 32
#: The longest line of text read by default, in characters (bytes for LIBSVM files, read as
#: bytes; 8 MiB of ASCII either way): parsing a line takes some 10 to 30 times its length in
#: memory, so one line costs at most a few hundred MiB.
DEFAULT_MAX_LINE_LENGTH = MAX_LINE_FIELDS * MAX_FIELD_WIDTH
#: The largest LIBSVM feature index read (the parser keeps indices as 32-bit integers).
MAX_LIBSVM_INDEX = 2**31 - 1

#: Text files of at most this many columns are read by pyarrow's CSV reader when it is installed.
FAST_CSV_MAX_COLUMNS = 4096


def _open_binary(path: Path):
    """Open a file for reading bytes, transparently gunzipping (detected by magic number)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == _GZIP_MAGIC else open(path, "rb")


def _open_text(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == _GZIP_MAGIC:
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")


def _check_exists(path) -> Path:
    """``path`` as a Path if it is a readable regular file; the error names it otherwise."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"data file not found: {path}")
    if path.is_dir():
        raise ValueError(f"{path} is a directory, not a data file")
    if not path.is_file():
        # a pipe or a device cannot be read more than once (and opening a pipe would wait)
        raise ValueError(f"{path} is not a regular file (a pipe or a device?); give a data file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return path


def _check_max_line_length(value) -> int:
    if value is None:
        return DEFAULT_MAX_LINE_LENGTH
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"max_line_length must be a positive integer, got {value!r}")
    return int(value)


def _bounded_lines(f, path: Path, max_line_length: int):
    """``(line number, line)`` of an open file, refusing a line longer than ``max_line_length``
    (read with ``readline(max_line_length + 1)``, so an endless line costs at most that much).
    Errors of a damaged file (bad UTF-8, a truncated gzip stream) are ValueErrors naming it."""
    newline = "\n" if isinstance(f, _io.TextIOBase) else b"\n"
    lineno = 0
    while True:
        try:
            line = f.readline(max_line_length + 1)
        except _READ_ERRORS as exc:
            raise _read_error(path, exc) from None
        if not line:
            return
        lineno += 1
        if len(line) > max_line_length and not line.endswith(newline):
            raise ValueError(
                f"{path}: line {lineno} is longer than {max_line_length} characters, the "
                "longest line read (if the file is right, raise max_line_length: "
                "--max-line-length on the command line)"
            )
        yield lineno, line


def _raw_file(f):
    """The binary file under a text file (under the gzip stream for a gzipped one)."""
    inner = getattr(f, "buffer", f)
    return getattr(inner, "fileobj", None) or inner


def _rows_bytes(rows: int, mean: float | None, position: int | None) -> int | None:
    """Bytes of a text file read for ``rows`` rows of ``mean`` bytes, at most ``position``."""
    if mean is None or position is None:
        return position
    return min(position, round(rows * mean))


def _position(raw) -> int | None:
    try:
        return int(raw.tell())
    except (OSError, ValueError, AttributeError):
        return None


#: What reading a damaged text or gzip file raises (gzip.BadGzipFile is an OSError).
_READ_ERRORS = (UnicodeDecodeError, OSError, EOFError, zlib.error)


def _read_error(path: Path, exc: BaseException) -> ValueError:
    """A ValueError naming the file for an exception raised while reading its bytes."""
    if isinstance(exc, EOFError | zlib.error) or "gzip" in type(exc).__name__.lower():
        return ValueError(f"{path}: truncated or damaged gzip file ({exc})")
    return ValueError(f"{path}: not a readable text file ({exc})")


def _first_content_line(path: Path, max_line_length: int = DEFAULT_MAX_LINE_LENGTH) -> str | None:
    try:
        with _open_text(path) as f:
            for _, line in _bounded_lines(f, path, max_line_length):
                stripped = line.strip()
                if stripped and not stripped.startswith("#"):
                    return stripped
    except _READ_ERRORS as exc:
        raise _read_error(path, exc) from None
    return None


def _looks_like_libsvm(line: str) -> bool:
    tokens = line.split()
    if len(tokens) < 2:
        return False
    # "label idx:val idx:val ...": every token after the label is "int:number" (qid:.. allowed)
    return all(":" in t for t in tokens[1:]) and tokens[1].split(":", 1)[0].isdigit()


def detect_format(path, *, max_line_length=None) -> str:
    """The reader format of ``path``: ``"npy"``, ``"text"``, ``"parquet"`` or ``"libsvm"``, by
    the suffix (ignoring ``.gz``), else by the content (a first line ``label index:value ...``
    is LIBSVM, other text is ``text``)."""
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    suffix = suffixes[-1] if suffixes else ""
    if suffix == ".npy":
        return "npy"
    if suffix in _PARQUET_SUFFIXES:
        return "parquet"
    if suffix in _LIBSVM_SUFFIXES:
        return "libsvm"
    if suffix in (".csv", ".tsv"):
        return "text"
    _check_exists(path)
    with open(path, "rb") as f:
        head = f.read(6)
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"PAR1"):
        return "parquet"
    line = _first_content_line(path, _check_max_line_length(max_line_length))
    if line is not None and _looks_like_libsvm(line):
        return "libsvm"
    return "text"


def _is_number(text: str) -> bool:
    try:
        float(text.strip().strip('"').strip("'"))
    except ValueError:
        return False
    return True


def _unquote(text: str) -> str:
    return text.strip().strip('"').strip("'")


def _is_real(text: str) -> bool:
    """Whether a field is a finite number written as a float (``2.5``, ``1e-3``), not an int."""
    try:
        int(_unquote(text))
        return False
    except ValueError:
        pass
    try:
        return bool(np.isfinite(float(_unquote(text))))
    except ValueError:
        return False


def _first_nonfinite(block) -> tuple[int, int, str]:
    """(row, column, 'NaN' | 'infinity') of the first non-finite entry of a dense block."""
    bad = ~np.isfinite(block)
    i, j = np.argwhere(bad)[0]
    return int(i), int(j), "NaN" if np.isnan(block[i, j]) else "infinity"


class DataReader:
    """A re-iterable reader of row blocks from one data file.

    ``iter(reader)`` yields feature blocks (2-D arrays, CSR for LIBSVM) of at most
    ``block_rows`` rows, from the top of the file on each call; :meth:`iter_labeled` yields
    ``(X_block, y_block)`` pairs and :meth:`read` the whole file.

    Attributes
    ----------
    path : pathlib.Path
    format : str
    n_features : int, the width of the feature blocks.
    n_samples : int or None, the number of rows when known (npy, parquet, or after a pass).
    column_names : list of str or None, the file's column names (header or schema).
    feature_names : list of str or None, the names of the selected feature columns.
    """

    format = "?"

    def __init__(
        self,
        path,
        *,
        block_rows=DEFAULT_BLOCK_ROWS,
        columns=None,
        label_column=None,
        dtype=np.float64,
        check_finite=True,
    ):
        self.path = _check_exists(path)
        if (
            not isinstance(block_rows, numbers.Integral)
            or isinstance(block_rows, bool)
            or block_rows < 1
        ):
            raise ValueError(f"block_rows must be a positive integer, got {block_rows!r}")
        self.block_rows = int(block_rows)
        auto = isinstance(dtype, str) and dtype == "auto"
        self.dtype = np.dtype(np.float64 if auto else dtype)
        if self.dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise ValueError(f"dtype must be float64, float32 or 'auto', got {dtype!r}")
        self.check_finite = bool(check_finite)
        #: Bytes of the file read so far in the current pass (text readers; None elsewhere),
        #: against ``size_bytes``: the progress of a pass whose row count is unknown.
        self.bytes_read: int | None = None
        self.size_bytes = self.path.stat().st_size
        self.column_names: list[str] | None = None
        self._n_columns = 0
        self._n_samples: int | None = None
        self._columns_spec = columns
        self._label_spec = label_column
        self._inspect()
        self._resolve_columns()
        if auto:
            self.dtype = self._native_dtype()

    # --- subclass hooks -------------------------------------------------------------------------
    def _inspect(self):
        """Read what is cheap to know up front; set column_names, _n_columns, _n_samples."""
        raise NotImplementedError

    def _blocks(self) -> Iterator[tuple[Any, Any]]:
        """Yield (features, labels or None) for consecutive row blocks."""
        raise NotImplementedError

    def _native_dtype(self) -> np.dtype:
        """The float type of the stored feature columns (``dtype="auto"``): float32 only when
        every selected column is stored as float32, so float32 files stay float32."""
        return np.dtype(np.float64)

    # --- public ----------------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return len(self._feature_idx)

    @property
    def n_samples(self) -> int | None:
        return self._n_samples

    @property
    def feature_names(self) -> list[str] | None:
        if self.column_names is None:
            return None
        return [self.column_names[j] for j in self._feature_idx]

    @property
    def has_labels(self) -> bool:
        return self._label_idx is not None

    @property
    def label_index(self) -> int | None:
        """The 0-based number of the label column, or None."""
        return self._label_idx

    def __iter__(self):
        for X, _ in self.iter_labeled():
            yield X

    def iter_labeled(self) -> Iterator[tuple[Any, Any]]:
        """Yield ``(X_block, y_block)``; y_block is None when the file has no label column."""
        n = 0
        for X, y in self._blocks():
            n += X.shape[0]
            yield X, y
        self._n_samples = n

    def read(self):
        """The whole file as ``(X, y)`` (y is None without a label column)."""
        Xs, ys = [], []
        for X, y in self.iter_labeled():
            Xs.append(X)
            ys.append(y)
        if not Xs:
            raise ValueError(f"{self.path}: no data rows")
        if sp.issparse(Xs[0]):
            X = sp.vstack(Xs, format="csr")
        else:
            X = Xs[0] if len(Xs) == 1 else np.concatenate(Xs, axis=0)
        y = None if ys[0] is None else (ys[0] if len(ys) == 1 else np.concatenate(ys))
        return X, y

    def rows_estimate(self) -> int | None:
        """The number of data rows without reading the file: exact where the file says it (npy,
        Parquet), else an estimate (delimited text: the file's size over the mean length of its
        first lines), else None (a gzipped or LIBSVM file)."""
        return self._n_samples

    def count_rows(self) -> int:
        """The number of data rows (a pass over the file unless already known)."""
        if self._n_samples is None:
            self._n_samples = self._count_rows()
        return self._n_samples

    def _count_rows(self) -> int:
        return sum(X.shape[0] for X, _ in self._blocks())

    def __repr__(self):
        return (
            f"{type(self).__name__}({str(self.path)!r}, n_features={self.n_features}, "
            f"n_samples={self.n_samples}, block_rows={self.block_rows})"
        )

    # --- columns ---------------------------------------------------------------------------------
    def _column_index(self, spec, what) -> int:
        n = self._n_columns
        if isinstance(spec, str):
            if self.column_names is None:
                raise ValueError(
                    f"{self.path}: {what} {spec!r} is a name, but the file has no "
                    "header; give a column number"
                )
            if spec not in self.column_names:
                raise ValueError(
                    f"{self.path}: no column named {spec!r} (columns: "
                    f"{', '.join(self.column_names[:20])}"
                    f"{', ...' if len(self.column_names) > 20 else ''})"
                )
            return self.column_names.index(spec)
        if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
            if not -n <= spec < n:
                raise ValueError(
                    f"{self.path}: {what} {spec} is out of range for a file with "
                    f"{n} columns (columns are numbered from 0; -1 is the last)"
                )
            return int(spec) % n
        raise ValueError(f"{what} must be a column number or name, got {spec!r}")

    def _resolve_columns(self):
        n = self._n_columns
        self._label_idx = (
            None
            if self._label_spec is None
            else self._column_index(self._label_spec, "label_column")
        )
        self._feature_idx: Sequence[int]
        if self._columns_spec is None:
            # ranges, not lists: a LIBSVM file's width may be large, and costs nothing here
            if self._label_idx is None:
                self._feature_idx = range(n)
            elif self._label_idx in (0, n - 1):
                self._feature_idx = range(1, n) if self._label_idx == 0 else range(n - 1)
            else:
                self._feature_idx = [j for j in range(n) if j != self._label_idx]
        else:
            spec = self._columns_spec
            if isinstance(spec, str | numbers.Integral):
                spec = [spec]
            self._feature_idx = [self._column_index(c, "column") for c in spec]
            if self._label_idx is not None and self._label_idx in self._feature_idx:
                raise ValueError(f"{self.path}: the label column is also selected as a feature")
        if not self._feature_idx:
            raise ValueError(f"{self.path}: no feature columns selected")
        idx = self._feature_idx
        self._all_features = (
            idx == range(n)
            if isinstance(idx, range)
            else len(idx) == n and list(idx) == list(range(n))
        )

    def _finite_check(self, X, row0, where=None):
        """Raise a ValueError naming file, row and column of the first NaN / infinity."""
        if not self.check_finite:
            return
        if nonfinite(X.data if sp.issparse(X) else X) is None:
            return
        if sp.issparse(X):
            X = X.tocoo()
            k = int(np.flatnonzero(~np.isfinite(X.data))[0])
            i, j = int(X.row[k]), int(X.col[k])
            what = "NaN" if np.isnan(X.data[k]) else "infinity"
        else:
            i, j, what = _first_nonfinite(X)
        col = self._feature_idx[j]
        raise ValueError(
            f"{self.path}: {self._where(row0 + i, where, i)}, {self._col_text(col)}: {what}"
        )

    def _where(self, row, where=None, i=None) -> str:
        """'row R' (1-based) plus the file line when the format has lines."""
        if where is not None and i is not None:
            return f"line {where[i]} (data row {row + 1})"
        return f"row {row + 1}"

    def _col_text(self, col) -> str:
        name = f" ({self.column_names[col]!r})" if self.column_names else ""
        return f"column {col + 1}{name}"


def _check_unique_names(path: Path, names: Sequence[str]) -> None:
    """Refuse a header or schema that names two columns alike (ValueError naming both)."""
    first: dict[str, int] = {}
    for j, name in enumerate(names):
        if name in first:
            raise ValueError(
                f"{path}: the column name {name!r} appears twice (columns {first[name] + 1} and "
                f"{j + 1}); column names must be unique to select columns by name: rename one"
            )
        first[name] = j


# --- npy ---------------------------------------------------------------------------------------


class NpyReader(DataReader):
    """Row blocks of a 2-D ``.npy`` array (only one block is read at a time)."""

    format = "npy"

    def _open(self):
        with open(self.path, "rb") as f:
            magic = f.read(6)
        if magic != b"\x93NUMPY":
            # numpy.load would take it for a pickle and suggest allow_pickle, which would run
            # code from the file: say what the file is not instead
            raise ValueError(
                f"{self.path}: not a .npy file (it does not start with the .npy signature); "
                f"give the right --format, or none to detect it"
            )
        try:
            return np.load(self.path, mmap_mode="r", allow_pickle=False)
        except Exception as exc:
            # a damaged header fails in numpy's header tokenizer or literal parser (TokenError,
            # SyntaxError) or its checks (ValueError); nothing of the file is run
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise ValueError(f"{self.path}: cannot read as .npy ({detail})") from None

    def _native_dtype(self):
        return np.dtype(np.float32 if self._open().dtype == np.float32 else np.float64)

    def _inspect(self):
        if self.path.stat().st_size == 0:
            raise ValueError(f"{self.path}: the file is empty")
        arr = self._open()
        if arr.ndim != 2:
            raise ValueError(
                f"{self.path}: expected a 2-D array (rows x features), got shape {arr.shape}"
            )
        if arr.dtype.kind not in "fiub":
            raise ValueError(f"{self.path}: expected numeric data, got dtype {arr.dtype}")
        if arr.shape[0] == 0 or arr.shape[1] == 0:
            raise ValueError(f"{self.path}: the array is empty (shape {arr.shape})")
        self._n_samples, self._n_columns = arr.shape

    def _blocks(self):
        arr = self._open()
        # A C-ordered file is read block by block with plain reads: the pages of a memory map
        # count in the process's resident memory until the whole map is dropped.
        if arr.flags.c_contiguous:
            chunks = self._read_chunks(arr)
        else:  # Fortran order: rows are not contiguous in the file, slice the map
            chunks = (arr[s : s + self.block_rows] for s in range(0, arr.shape[0], self.block_rows))
        for start, chunk in zip(range(0, arr.shape[0], self.block_rows), chunks, strict=True):
            if self._all_features:
                X = np.array(chunk, dtype=self.dtype)
            else:
                X = np.asarray(chunk[:, self._feature_idx], dtype=self.dtype)
            self._finite_check(X, start)
            y = None if self._label_idx is None else np.array(chunk[:, self._label_idx])
            yield X, y

    def _read_chunks(self, arr):
        """Consecutive ``block_rows``-row chunks of a C-ordered file, read without a map."""
        n, width = arr.shape
        dtype = arr.dtype
        with open(self.path, "rb") as f:
            f.seek(arr.offset)
            for start in range(0, n, self.block_rows):
                rows = min(self.block_rows, n - start)
                chunk = np.fromfile(f, dtype=dtype, count=rows * width)
                if chunk.size != rows * width:
                    raise ValueError(
                        f"{self.path}: the file is truncated (row {start + 1} onwards is missing)"
                    )
                yield chunk.reshape(rows, width)

    def _count_rows(self):
        return self._n_samples


# --- delimited text ----------------------------------------------------------------------------


class TextReader(DataReader):
    """Row blocks of delimited text (CSV, TSV, whitespace), optionally gzipped.

    The delimiter is a tab for ``.tsv``, a comma for ``.csv``, else sniffed from the first line;
    the first line is a header when none of its fields is a number (``header=`` overrides).
    Blank lines and ``#`` lines are skipped.  Blocks of lines are parsed by ``numpy.loadtxt``;
    on failure the block is scanned again to name the bad cell.  Column names must be unique.
    """

    format = "text"

    def __init__(self, path, *, delimiter="auto", header="auto", max_line_length=None, **kwargs):
        self._delimiter_spec = delimiter
        self._header_spec = header
        self.max_line_length = _check_max_line_length(max_line_length)
        super().__init__(path, **kwargs)

    def _split(self, line):
        return line.split(self.delimiter) if self.delimiter is not None else line.split()

    def _inspect(self):
        first = _first_content_line(self.path, self.max_line_length)
        if first is None:
            raise ValueError(f"{self.path}: the file is empty (no data rows)")
        delim = self._delimiter_spec
        if delim == "auto":
            suffixes = [s.lower() for s in self.path.suffixes if s.lower() != ".gz"]
            suffix = suffixes[-1] if suffixes else ""
            if suffix == ".tsv" or "\t" in first:
                delim = "\t"
            elif suffix == ".csv" and "," in first:
                delim = ","
            else:
                delim = next((d for d in (",", ";") if d in first), None)
        self.delimiter = delim
        self.bytes_read = 0  # the progress of a pass is followed in bytes
        # the first line is split into fields only where its names are needed: a data line of
        # 10**5 numbers would cost some 60 bytes per field as Python strings
        self._n_columns = first.count(delim) + 1 if delim is not None else len(first.split())
        if self._header_spec == "auto":
            self.has_header = False  # for _lines while deciding
            head = first.split(delim, 1)[0] if delim is not None else first.split(None, 1)[0]
            if _is_number(head):
                # a data line, unless it is a header of column numbers 0, 1, ... or 1, 2, ...
                self.has_header = _unquote(head) in ("0", "1") and self._numbered_header(first)
            else:
                self.has_header = not any(_is_number(f) for f in self._split(first))
        else:
            self.has_header = bool(self._header_spec)
        if self.has_header:
            self.column_names = [_unquote(f) for f in self._split(first)]
            _check_unique_names(self.path, self.column_names)
            if not any(True for _ in itertools.islice(self._lines(), 1)):
                raise ValueError(f"{self.path}: no data rows (only a header)")

    def _lines(self, *, skip_header=True, track=False) -> Iterator[tuple[int, str]]:
        """(line number, text) of the data lines: blank, comment and header lines skipped;
        ``track``: :attr:`bytes_read` follows the file's position."""
        with _open_text(self.path) as f:
            header_pending = self.has_header and skip_header
            raw = _raw_file(f) if track else None
            for lineno, line in _bounded_lines(f, self.path, self.max_line_length):
                stripped = line.strip()
                if not stripped or stripped.startswith("#"):
                    continue
                if header_pending:
                    header_pending = False
                    continue
                if raw is not None and lineno % 1024 == 0:
                    self.bytes_read = _position(raw)
                yield lineno, stripped
            if raw is not None:
                self.bytes_read = self.size_bytes

    def _numbered_header(self, first: str) -> bool:
        """Whether an all-numeric first line ``0,1,...,n-1`` or ``1,2,...,n`` (pandas' default
        labels) is a header: when the next lines hold a non-integer among their first 64 fields,
        or the run is at least 8 long and no next line repeats it."""
        try:
            values = [int(_unquote(f)) for f in self._split(first)]
        except ValueError:
            return False
        n = len(values)
        if n < 2 or values not in (list(range(n)), list(range(1, n + 1))):
            return False
        has_body = has_real = False
        for _, text in itertools.islice(self._lines(skip_header=False), 1, 21):
            if text == first:
                return False
            has_body = True
            head = text.split(self.delimiter, 64)[:64]
            has_real = has_real or any(_is_real(f) for f in head)
        return has_body and (n >= 8 or has_real)

    def _blocks(self):
        self.bytes_read = 0
        row0 = 0
        if self._fast_csv_applies():
            # pyarrow's streaming CSV reader where it reads the file as this reader would; from
            # the first block it cannot, the rest is read here (which reads it or names the cell)
            for X, y in self._fast_csv_blocks():
                yield X, y
                row0 += X.shape[0]
        yield from self._text_blocks(row0)

    def _text_blocks(self, row0=0):
        """Blocks of the data lines from data row ``row0`` on (numpy.loadtxt)."""
        lines_iter = self._lines(track=True)
        if row0:
            for _ in itertools.islice(lines_iter, row0):
                pass
        while True:
            chunk = list(itertools.islice(lines_iter, self.block_rows))
            if not chunk:
                return
            linenos = [c[0] for c in chunk]
            texts = [c[1] for c in chunk]
            X, y = self._parse(texts, linenos, row0)
            self._finite_check(X, row0, linenos)
            yield X, y
            row0 += len(chunk)

    def _fast_csv_applies(self) -> bool:
        """Whether pyarrow's CSV reader reads this file as :meth:`_text_blocks` would: pyarrow
        installed, a one-character delimiter, at most :data:`FAST_CSV_MAX_COLUMNS` columns
        (pyarrow keeps each column apart: a very wide line costs many times its length), the
        default line limit (pyarrow's block size: a longer line stops it), and the header, if
        any, on the first line."""
        if self.delimiter is None or len(self.delimiter) != 1:
            return False
        if self._n_columns > FAST_CSV_MAX_COLUMNS:
            return False
        if self.max_line_length != DEFAULT_MAX_LINE_LENGTH:
            return False
        try:
            import pyarrow.csv  # noqa: F401
        except ImportError:
            return False
        with _open_text(self.path) as f:
            try:
                first = f.readline(self.max_line_length + 1)
            except _READ_ERRORS:
                return False
        stripped = first.strip()
        return bool(stripped) and not stripped.startswith("#")

    def _fast_csv_blocks(self) -> Iterator[tuple[Any, Any]]:
        """Blocks read by ``pyarrow.csv.open_csv`` until one it cannot read as
        :meth:`_text_blocks` would (then it stops, and that block is read again there)."""
        import pyarrow as pa
        import pyarrow.csv as pacsv

        names = [f"c{j}" for j in range(self._n_columns)]
        features = [names[j] for j in self._feature_idx]
        label = None if self._label_idx is None else names[self._label_idx]
        types = dict.fromkeys(features, pa.float64())
        if label is not None:
            types[label] = pa.string()
        with open(self.path, "rb") as probe:
            gz = probe.read(2) == _GZIP_MAGIC
        # a plain file through pyarrow's own file (no Python in the reading loop); a gzipped one
        # through Python's gzip, whose compressed position gives the progress
        with gzip.open(self.path, "rb") if gz else pa.OSFile(str(self.path)) as f:
            raw = f.fileobj if gz else f
            try:
                reader = pacsv.open_csv(
                    f,
                    read_options=pacsv.ReadOptions(
                        skip_rows=1 if self.has_header else 0,
                        column_names=names,
                        block_size=DEFAULT_MAX_LINE_LENGTH,
                        # no read-ahead: memory stays bounded by a block, and the file's position
                        # is what has been read (the progress of a pass)
                        use_threads=False,
                    ),
                    parse_options=pacsv.ParseOptions(
                        delimiter=self.delimiter, quote_char='"', ignore_empty_lines=True
                    ),
                    convert_options=pacsv.ConvertOptions(
                        column_types=types,
                        include_columns=features + ([label] if label is not None else []),
                        null_values=[],
                        strings_can_be_null=False,
                        quoted_strings_can_be_null=False,
                    ),
                )
            except (pa.ArrowException, *_READ_ERRORS):
                return
            # pyarrow reads ahead of the rows it has handed over: the bytes read so far are
            # counted from those rows, at the mean length of the file's first lines (at most
            # the file's position)
            head = self._head_bytes() if not gz else None
            mean = self._mean_line_bytes(head) if head else None
            pending: list = []
            n_pending = rows = 0
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except (pa.ArrowException, *_READ_ERRORS):
                    return
                pending.append(batch)
                n_pending += batch.num_rows
                while n_pending >= self.block_rows:
                    table = pa.Table.from_batches(pending)
                    X, y = self._arrow_block(table.slice(0, self.block_rows), features, label)
                    if X is None:
                        return
                    rest = table.slice(self.block_rows)
                    pending, n_pending = rest.to_batches(), rest.num_rows
                    rows += X.shape[0]
                    self.bytes_read = _rows_bytes(rows, mean, _position(raw))
                    yield X, y
            if n_pending:
                X, y = self._arrow_block(pa.Table.from_batches(pending), features, label)
                if X is None:
                    return
                yield X, y
        self.bytes_read = self.size_bytes

    def _arrow_block(self, table, features, label):
        """One block of a pyarrow table as (X, y); (None, None) where a value is not finite
        (:meth:`_text_blocks` then names its line)."""
        X = np.empty((table.num_rows, len(features)), dtype=self.dtype)
        for k, name in enumerate(features):
            X[:, k] = table.column(name).to_numpy()
        if self.check_finite and not np.isfinite(X).all():
            return None, None
        y = None
        if label is not None:
            text = np.asarray(table.column(label).to_numpy(zero_copy_only=False), dtype=str)
            try:
                y = text.astype(np.float64)
            except ValueError:  # text labels (class names) stay strings
                y = np.char.strip(text, "\"'")
        return X, y

    def _count_rows(self):
        return sum(1 for _ in self._lines())

    def rows_estimate(self) -> int | None:
        if self._n_samples is not None:
            return self._n_samples
        head = self._head_bytes()
        if head is None:
            return None
        if len(head) == self.size_bytes:  # the whole file: count its data lines
            return sum(1 for _ in self._lines())
        mean = self._mean_line_bytes(head)
        return None if mean is None else max(1, round(self.size_bytes / mean))

    def _head_bytes(self, size: int = 2**20) -> bytes | None:
        """The first ``size`` bytes of a plain (not gzipped) file."""
        with open(self.path, "rb") as f:
            head = f.read(size)
        return None if head[:2] == _GZIP_MAGIC else head

    def _mean_line_bytes(self, head: bytes) -> float | None:
        """The mean length in bytes, newline included, of the data lines that start the file."""
        lines = head.splitlines()
        if len(head) < self.size_bytes:
            lines = lines[:-1]  # the last may be cut
        data = [line for line in lines if line.strip() and not line.lstrip().startswith(b"#")]
        if self.has_header and data:
            data = data[1:]
        return sum(len(line) + 1 for line in data) / len(data) if data else None

    def _parse(self, texts, linenos, row0):
        n = self._n_columns
        if self.delimiter is None:
            counts = [len(t.split()) for t in texts]
        else:
            counts = [t.count(self.delimiter) + 1 for t in texts]
        if any(c != n for c in counts):
            i = next(i for i, c in enumerate(counts) if c != n)
            raise ValueError(
                f"{self.path}: {self._where(row0 + i, linenos, i)} has {counts[i]} "
                f"columns, expected {n} (ragged rows)"
            )
        opts: dict[str, Any] = dict(delimiter=self.delimiter, comments=None, quotechar='"', ndmin=2)
        try:
            usecols = None if self._all_features else list(self._feature_idx)
            X = np.loadtxt(texts, usecols=usecols, dtype=self.dtype, **opts)
        except ValueError as exc:
            self._locate_bad_cell(texts, linenos, row0)
            raise ValueError(f"{self.path}: rows {row0 + 1}-{row0 + len(texts)}: {exc}") from None
        y = None
        if self._label_idx is not None:
            try:
                y = np.loadtxt(texts, usecols=[self._label_idx], dtype=np.float64, **opts)[:, 0]
            except ValueError:  # text labels (class names) stay strings
                y = np.loadtxt(texts, usecols=[self._label_idx], dtype=str, **opts)[:, 0]
                y = np.char.strip(y, "\"'")
        return X, y

    def _locate_bad_cell(self, texts, linenos, row0):
        for i, text in enumerate(texts):
            fields = self._split(text)
            for j in self._feature_idx:
                if not _is_number(fields[j]):
                    raise ValueError(
                        f"{self.path}: {self._where(row0 + i, linenos, i)}, "
                        f"{self._col_text(j)}: cannot read {fields[j].strip()!r} "
                        "as a number"
                    )


# --- parquet -----------------------------------------------------------------------------------


def _import_parquet():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            "reading Parquet files needs pyarrow; install it with pip install 'fastkpca[parquet]'"
        ) from None
    return pa, pq


class ParquetReader(DataReader):
    """Row blocks of a Parquet file, one pyarrow record batch at a time (numeric columns).

    Column names must be unique: a schema with two columns of one name is refused with a
    ValueError naming the file and the name (columns are read by name).
    """

    format = "parquet"

    def _file(self):
        _, pq = _import_parquet()
        try:
            return pq.ParquetFile(self.path)
        except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for damaged files
            raise ValueError(f"{self.path}: cannot read as Parquet ({exc})") from None

    def _inspect(self):
        pa, _ = _import_parquet()
        pf = self._file()
        schema = pf.schema_arrow
        self.column_names = list(schema.names)
        _check_unique_names(self.path, self.column_names)
        self._n_columns = len(self.column_names)
        self._n_samples = pf.metadata.num_rows
        self._types = [schema.field(i).type for i in range(self._n_columns)]
        if self._n_samples == 0 or self._n_columns == 0:
            raise ValueError(f"{self.path}: the file has no data rows")

    def _resolve_columns(self):
        super()._resolve_columns()
        pa, _ = _import_parquet()
        for j in self._feature_idx:
            t = self._types[j]
            if not (
                pa.types.is_integer(t)
                or pa.types.is_floating(t)
                or pa.types.is_boolean(t)
                or pa.types.is_decimal(t)
            ):
                raise ValueError(f"{self.path}: {self._col_text(j)} has type {t}, not a number")

    def _native_dtype(self):
        pa, _ = _import_parquet()
        float32 = all(self._types[j] == pa.float32() for j in self._feature_idx)
        return np.dtype(np.float32 if float32 else np.float64)

    def _blocks(self):
        pf = self._file()
        names = [self.column_names[j] for j in self._feature_idx]
        label = [] if self._label_idx is None else [self.column_names[self._label_idx]]
        row0 = 0
        for batch in pf.iter_batches(batch_size=self.block_rows, columns=names + label):
            X = np.empty((batch.num_rows, len(names)), dtype=self.dtype)
            for k, name in enumerate(names):
                col = batch.column(name)
                if col.null_count:
                    i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                    raise ValueError(
                        f"{self.path}: row {row0 + i + 1}, "
                        f"{self._col_text(self._feature_idx[k])}: missing value"
                    )
                X[:, k] = col.to_numpy(zero_copy_only=False)
            self._finite_check(X, row0)
            y = None
            if label:
                y = np.asarray(batch.column(label[0]).to_numpy(zero_copy_only=False))
            yield X, y
            row0 += batch.num_rows

    def _count_rows(self):
        return self._n_samples


# --- LIBSVM ------------------------------------------------------------------------------------


class LibsvmReader(DataReader):
    """CSR row blocks of a LIBSVM / SVMlight text file (labels first, ``index:value`` pairs).

    Chunks of lines are parsed by ``sklearn.datasets.load_svmlight_file``.  The width is
    ``n_features``, or found by one scan of the file, which also decides ``zero_based="auto"``
    (0-based when an index 0 occurs, as scikit-learn decides; 1-based with ``n_features``
    given).  The numbering (:attr:`index_base`) is recorded by a model fitted on the file.
    Each line is checked (numbers, ``index:value`` tokens, indices ascending within
    ``[index_base, n_features]`` and :data:`MAX_LIBSVM_INDEX`); a ValueError names the line and
    token.  A scanned width above ``max_features`` (default :func:`default_max_features`) is
    refused.
    """

    format = "libsvm"

    def __init__(
        self,
        path,
        *,
        n_features=None,
        zero_based="auto",
        max_features=None,
        max_line_length=None,
        **kwargs,
    ):
        for name, value in (("n_features", n_features), ("max_features", max_features)):
            if value is not None and (
                not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1
            ):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if zero_based not in ("auto", True, False):
            raise ValueError(f"zero_based must be 'auto', True or False, got {zero_based!r}")
        self._n_features_spec = n_features
        self._max_features = max_features
        self._zero_based_spec = zero_based
        self.max_line_length = _check_max_line_length(max_line_length)
        super().__init__(path, **kwargs)

    @property
    def index_base(self) -> int:
        """The number of the first feature in the file: 0 or 1 (see the class notes)."""
        return 0 if self.zero_based else 1

    def _inspect(self):
        if self._label_spec is not None:
            raise ValueError(
                "label_column does not apply to LIBSVM files (the label is the "
                "first token of each line)"
            )
        if _first_content_line(self.path, self.max_line_length) is None:
            raise ValueError(f"{self.path}: the file is empty (no data rows)")
        if self._n_features_spec is None:
            self._scan()
        else:
            self._n_columns = int(self._n_features_spec)
            self.zero_based = self._zero_based_spec is True

    def _scan(self):
        """One pass: the largest and smallest feature index (and the row count)."""
        max_col, min_idx, rows = 0, None, 0
        for chunk, linenos, row0 in self._chunks():
            # indices as written (zero_based=True keeps them): the numbering is decided below
            X = self._parse(chunk, linenos, row0, n_features=None, zero_based=True)
            max_col = max(max_col, X.shape[1])
            if X.nnz:
                m = int(X.indices.min())
                if m == 0 and self._zero_based_spec is False:
                    # the line of the first index 0, for the error
                    i = int(np.searchsorted(X.indptr, np.argmin(X.indices), side="right")) - 1
                    raise ValueError(
                        f"{self.path}: {self._where(row0 + i, linenos, i)}: feature index 0, "
                        "but the features are read as numbered from 1 (zero_based=False)"
                    )
                min_idx = m if min_idx is None else min(min_idx, m)
            rows += X.shape[0]
        zero_based = self._zero_based_spec
        if zero_based == "auto":
            zero_based = min_idx == 0
        self.zero_based = bool(zero_based)
        self._n_columns = max(1, max_col if self.zero_based else max_col - 1)
        self._n_samples = rows
        if self._max_features is not None and self._n_columns > self._max_features:
            raise ValueError(
                f"{self.path}: feature index {self._n_columns} is beyond the declared width "
                f"of {self._max_features} features"
            )
        limit = self._max_features or default_max_features(self._bytes_scanned)
        if self._n_columns > limit:
            raise ValueError(
                f"{self.path}: feature index {self._n_columns} is far beyond what "
                f"{self._bytes_scanned} bytes of data need (at most {limit} features without "
                "a declared width); give the number of features (n_features) if it is right"
            )

    def _chunks(self):
        self._bytes_scanned = 0
        with _open_binary(self.path) as f:
            row0 = 0
            buf: list[bytes] = []
            linenos: list[int] = []
            for lineno, line in _bounded_lines(f, self.path, self.max_line_length):
                self._bytes_scanned += len(line)
                stripped = line.strip()
                if not stripped or stripped.startswith(b"#"):
                    continue
                buf.append(stripped)
                linenos.append(lineno)
                if len(buf) == self.block_rows:
                    yield buf, linenos, row0
                    row0 += len(buf)
                    buf, linenos = [], []
            if buf:
                yield buf, linenos, row0

    def _parse(self, lines, linenos, row0, *, n_features, zero_based):
        from sklearn.datasets import load_svmlight_file

        try:
            X, y = load_svmlight_file(
                _io.BytesIO(b"\n".join(lines) + b"\n"),
                n_features=n_features,
                dtype=self.dtype,
                zero_based=zero_based,
            )
        except (ValueError, OverflowError) as exc:
            # OverflowError: an index beyond the parser's 32-bit integers
            self._locate_bad_line(lines, linenos, row0, n_features, zero_based)
            raise ValueError(f"{self.path}: rows {row0 + 1}-{row0 + len(lines)}: {exc}") from None
        self._last_labels = y
        return X

    def _locate_bad_line(self, lines, linenos, row0, n_features, zero_based):
        """Raise a ValueError naming the first bad line of a chunk and what is wrong with it."""
        from sklearn.datasets import load_svmlight_file

        for i, line in enumerate(lines):
            where = self._where(row0 + i, linenos, i)
            problem = _libsvm_line_problem(line, zero_based=zero_based, n_features=n_features)
            if problem is not None:
                raise ValueError(f"{self.path}: {where}, {problem}")
            try:  # what the checks above do not know of: the parser's own verdict
                load_svmlight_file(
                    _io.BytesIO(line + b"\n"), n_features=n_features, zero_based=zero_based
                )
            except (ValueError, OverflowError) as exc:
                raise ValueError(f"{self.path}: {where}: {exc}") from None

    def _blocks(self):
        for chunk, linenos, row0 in self._chunks():
            X = self._parse(
                chunk, linenos, row0, n_features=self._n_columns, zero_based=self.zero_based
            )
            y = self._last_labels
            if not self._all_features:
                X = X[:, self._feature_idx]
            self._finite_check(X, row0, linenos)
            yield X, y

    def _count_rows(self):
        return sum(len(chunk) for chunk, _, _ in self._chunks())


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _libsvm_line_problem(line: bytes, *, zero_based: bool, n_features: int | None) -> str | None:
    """What is wrong with one LIBSVM line (``label index:value ...``), in words; None if nothing.

    The answer starts with the token, called a column and numbered from 1 (the label is column
    1) as columns are in the other formats.
    """
    tokens = line.split(b"#", 1)[0].decode("utf-8", "replace").split()
    if not tokens:
        return None
    if not _is_float(tokens[0]):
        return f"column 1 (label): cannot read {tokens[0]!r} as a number"
    previous = None
    for k, token in enumerate(tokens[1:], 2):
        where = f"column {k} (token {token!r})"
        name, sep, value = token.partition(":")
        if not sep:
            return f"{where}: expected index:value"
        if name == "qid":
            if not value.lstrip("+").isdigit():
                return f"{where}: the query id is not an integer"
            continue
        if not name.lstrip("+-").isdigit():
            return f"{where}: the feature index {name!r} is not an integer"
        index = int(name)
        if index < 0:
            return f"{where}: negative feature index {index}"
        if index > MAX_LIBSVM_INDEX:
            return f"{where}: feature index {name} is too large (at most {MAX_LIBSVM_INDEX})"
        if index == 0 and not zero_based:
            return f"{where}: feature index 0, but the features are read as numbered from 1"
        if previous is not None and index == previous:
            return f"{where}: feature index {index} appears twice in the line"
        if previous is not None and index < previous:
            return f"{where}: feature indices must be ascending ({index} after {previous})"
        if not _is_float(value):
            return f"{where}: cannot read the value {value!r} as a number"
        column = index if zero_based else index - 1
        if n_features is not None and column >= n_features:
            return (
                f"{where}: feature index {index} is beyond n_features={n_features} "
                f"(features numbered from {0 if zero_based else 1})"
            )
        previous = index
    return None


def default_max_features(n_bytes: int) -> int:
    """The widest LIBSVM file accepted without a declared width, for ``n_bytes`` of text: 16
    per byte (a token takes at least 4 bytes), at least 2**20, room for news20, url, kdd2010."""
    return max(2**20, 16 * int(n_bytes))


_READERS = {"npy": NpyReader, "text": TextReader, "parquet": ParquetReader, "libsvm": LibsvmReader}
_FORMAT_OPTIONS = {
    "npy": set(),
    "parquet": set(),
    "text": {"delimiter", "header", "max_line_length"},
    "libsvm": {"n_features", "zero_based", "max_features", "max_line_length"},
}


def open_data(
    path,
    *,
    format=None,
    block_rows=DEFAULT_BLOCK_ROWS,
    columns=None,
    label_column=None,
    dtype=np.float64,
    check_finite=True,
    **options,
) -> DataReader:
    """Open a data file as a re-iterable reader of row blocks.

    Parameters
    ----------
    path : str or Path
        A ``.npy``, delimited text (optionally gzipped), ``.parquet`` or LIBSVM file.
    format : {"npy", "text", "csv", "tsv", "parquet", "libsvm"} or None
        None detects it (:func:`detect_format`).
    block_rows : int
        Rows per block (default: the estimators' own block size).
    columns : list of int or str, optional
        Feature columns to keep (0-based numbers, negative from the end, or header names);
        default all but the label column.
    label_column : int or str, optional
        A column of labels, kept out of the features (``iter_labeled`` yields it).
    dtype : float64 (default), float32 or "auto"
        ``"auto"`` keeps float32 where the file stores float32 (npy, Parquet).
    check_finite : bool
        Raise a ValueError naming the row and column of the first NaN or infinity.
    **options
        Text: ``delimiter`` (``"auto"``, a string, or None for whitespace), ``header``
        (``"auto"``, True, False).  LIBSVM: ``n_features``, ``zero_based``, ``max_features``.
        Both: ``max_line_length`` (default :data:`DEFAULT_MAX_LINE_LENGTH`).

    Returns
    -------
    DataReader
        ``iter(reader)`` yields feature blocks; ``reader.n_features`` is the width.
    """
    path = _check_exists(path)
    if format is None:
        fmt = detect_format(path, max_line_length=options.get("max_line_length"))
    else:
        fmt = _FORMAT_ALIASES.get(format, format)
    if fmt not in _READERS:
        raise ValueError(f"unknown format {format!r}; choose one of {FORMATS}")
    unknown = set(options) - _FORMAT_OPTIONS[fmt]
    if unknown:
        raise ValueError(
            f"option(s) {', '.join(sorted(unknown))} do not apply to {fmt} files ({path})"
        )
    return _READERS[fmt](
        path,
        block_rows=block_rows,
        columns=columns,
        label_column=label_column,
        dtype=dtype,
        check_finite=check_finite,
        **options,
    )


def read_data(path, **kwargs):
    """Read a whole data file: returns ``(X, y)``, with y None when there are no labels.

    Takes the arguments of :func:`open_data`.  X is a dense array, or CSR for LIBSVM files.
    LIBSVM files always have labels; other formats have them when ``label_column`` is given.
    """
    reader = open_data(path, **kwargs)
    if isinstance(reader, NpyReader | ParquetReader):
        # The row count is known: fill one preallocated array instead of concatenating blocks.
        X = np.empty((reader.n_samples, reader.n_features), dtype=reader.dtype)
        ys = []
        start = 0
        for Xb, yb in reader.iter_labeled():
            X[start : start + Xb.shape[0]] = Xb
            start += Xb.shape[0]
            ys.append(yb)
        y = None if not reader.has_labels else np.concatenate(ys)
        return X, y
    return reader.read()
