"""``fastkpca transform``: project a data file on a model, block by block."""

from __future__ import annotations

import gzip
import sys
import time
from pathlib import Path

import numpy as np
from numpy.lib.format import dtype_to_descr

from ..persistence import atomic_output, load_with_info
from ._common import CLIError, _check_output, _claim_output
from ._data import _BlockStream, _on_arrays, _open_for_model, _use_jobs


class _NpyWriter:
    """Writes a .npy file block by block without knowing the row count in advance.

    The header (NumPy format 1.0: magic, version, little-endian header length, a Python-literal
    dict padded with spaces to a multiple of 64 bytes) is written with room to spare and rewritten
    with the final shape at the end; readers ignore the trailing spaces.
    """

    _HEADER_BYTES = 128

    def __init__(self, path):
        self.path = Path(path)
        self.f = None
        self.rows = 0
        self.dtype = None
        self.width = None

    def _header(self, rows):

        d = {
            "descr": dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": (rows, self.width),
        }
        text = repr(d).encode("latin1")
        room = self._HEADER_BYTES - 10 - 1
        if len(text) > room:
            raise CLIError("output array too wide for the .npy writer")
        text = text + b" " * (room - len(text)) + b"\n"
        return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text

    def write(self, block):
        if self.f is None:
            self.dtype, self.width = block.dtype.newbyteorder("<"), block.shape[1]
            self.f = open(self.path, "wb")
            self.f.write(self._header(0))
        self.f.write(np.ascontiguousarray(block, dtype=self.dtype).tobytes())
        self.rows += block.shape[0]

    def close(self):
        if self.f is None:
            return
        self.f.seek(0)
        self.f.write(self._header(self.rows))
        self.f.close()


class _TextWriter:
    """Writes a .csv / .tsv (optionally .gz) file whose header is the model's output names
    (``get_feature_names_out``: ``nystromkpca0, nystromkpca1, ...``).

    ``path`` decides the format; the rows go to ``file`` (default ``path``).
    """

    def __init__(self, path, names, file=None):
        self.path = Path(path)
        self.names = names
        suffixes = [s.lower() for s in self.path.suffixes]
        gz = bool(suffixes) and suffixes[-1] == ".gz"
        base = suffixes[-2] if gz and len(suffixes) > 1 else (suffixes[-1] if suffixes else "")
        self.delimiter = "\t" if base == ".tsv" else ","
        target = Path(file) if file is not None else self.path
        self.f = gzip.open(target, "wt") if gz else open(target, "w")  # noqa: SIM115
        self.started = False

    def write(self, block):
        if not self.started:
            self.f.write(self.delimiter.join(_names(self.names, block.shape[1])) + "\n")
            self.started = True
        # shortest repr that round-trips: 17 significant digits for float64, 9 for float32
        fmt = "%.9g" if block.dtype == np.float32 else "%.17g"
        np.savetxt(self.f, block, fmt=fmt, delimiter=self.delimiter)

    def close(self):
        self.f.close()


class _ParquetWriter:
    """Writes a Parquet file, one row group per block, its columns named as the model's output
    (``get_feature_names_out``), so that ``fastkpca`` reads back what it writes."""

    def __init__(self, path, names, file=None):
        self.pa, self.pq = _import_pyarrow()
        self.target = Path(file) if file is not None else Path(path)
        self.names = names
        self.writer = None

    def write(self, block):
        pa = self.pa
        names = _names(self.names, block.shape[1])
        table = pa.table({name: block[:, j] for j, name in enumerate(names)})
        if self.writer is None:
            self.writer = self.pq.ParquetWriter(str(self.target), table.schema)
        self.writer.write_table(table)

    def close(self):
        if self.writer is not None:
            self.writer.close()


def _import_pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CLIError(
            "writing Parquet needs pyarrow; install it with pip install 'fastkpca[parquet]'"
        ) from None
    return pa, pq


def _names(names, width: int) -> list[str]:
    """The output column names: the model's, or ``pc1, pc2, ...`` for a model without them."""
    if names is not None and len(names) == width:
        return [str(n) for n in names]
    return [f"pc{j + 1}" for j in range(width)]


def _output_names(model) -> list[str] | None:
    try:
        return list(model.get_feature_names_out())
    except Exception:  # a model without output names (or not fitted with them)
        return None


def _output_kind(path) -> str:
    """``"npy"``, ``"text"`` or ``"parquet"``: the writer for an output name (refused before any
    work, with a missing pyarrow for Parquet)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    suffix = suffixes[-1] if suffixes else ""
    gz = str(path).lower().endswith(".gz")
    if suffix == ".npy" and not gz:
        return "npy"
    if suffix in (".csv", ".tsv"):
        return "text"
    if suffix in (".parquet", ".pq") and not gz:
        _import_pyarrow()
        return "parquet"
    raise CLIError(
        f"output {path}: write .npy, .csv, .tsv (optionally .csv.gz / .tsv.gz) or .parquet"
    )


def _writer(path, model, file=None):
    """The writer for output ``path``, writing to ``file`` (a temporary name) when given."""
    kind = _output_kind(path)
    if kind == "npy":
        return _NpyWriter(path if file is None else file)
    names = _output_names(model)
    if kind == "parquet":
        return _ParquetWriter(path, names, file)
    return _TextWriter(path, names, file)


def run(args):

    _check_output(args.output, data=args.data, model=args.model)
    _output_kind(args.output)
    _claim_output(args.output, force=args.force)
    model, meta = load_with_info(args.model)
    _use_jobs(args, model)
    reader = _open_for_model(args, model, meta)
    dense = not getattr(model, "_accepts_sparse", False)
    t0 = time.perf_counter()
    # the rows go to a temporary file renamed over OUT at the end: a failure (bad row,
    # interruption, full disk) leaves an existing OUT as it was
    with atomic_output(args.output) as tmp:
        writer = _writer(args.output, model, tmp)
        try:
            stream = _BlockStream(reader, args, dense=dense, desc=f"transforming {args.data}")
            with _on_arrays(model):
                for block in stream:
                    writer.write(model.transform(block))
        finally:
            writer.close()
        # again, before the rename: a file may have appeared under that name meanwhile
        replacing = _claim_output(args.output, force=args.force)
    if replacing:
        print(replacing, file=sys.stderr)
    seconds = time.perf_counter() - t0
    rows = getattr(writer, "rows", None) or reader.n_samples
    print(
        f"transformed {rows} rows with {type(model).__name__} in {seconds:.2f} s -> {args.output}"
    )
    return 0
