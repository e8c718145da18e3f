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
    """Writes a .csv / .tsv (optionally .gz) file with a header ``pc1, pc2, ...``.

    ``path`` decides the format; the rows go to ``file`` (default ``path``).
    """

    def __init__(self, path, file=None):

        self.path = Path(path)
        suffixes = [s.lower() for s in self.path.suffixes]
        gz = bool(suffixes) and suffixes[-1] == ".gz"
        base = suffixes[-2] if gz and len(suffixes) > 1 else (suffixes[-1] if suffixes else "")
        self.delimiter = "\t" if base == ".tsv" else ","
        target = Path(file) if file is not None else self.path
        self.f = gzip.open(target, "wt") if gz else open(target, "w")
        self.started = False

    def write(self, block):
        if not self.started:
            self.f.write(self.delimiter.join(f"pc{j + 1}" for j in range(block.shape[1])) + "\n")
            self.started = True
        # shortest repr that round-trips: 17 significant digits for float64, 9 for float32
        fmt = "%.9g" if block.dtype == np.float32 else "%.17g"
        np.savetxt(self.f, block, fmt=fmt, delimiter=self.delimiter)

    def close(self):
        self.f.close()


def _output_kind(path) -> str:
    """``"npy"`` or ``"text"``: the writer for an output name (refused before any work)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    suffix = suffixes[-1] if suffixes else ""
    if suffix == ".npy" and not str(path).lower().endswith(".gz"):
        return "npy"
    if suffix in (".csv", ".tsv"):
        return "text"
    raise CLIError(f"output {path}: write .npy, .csv or .tsv (optionally .csv.gz / .tsv.gz)")


def _writer(path, file=None):
    """The writer for output ``path``, writing to ``file`` (a temporary name) when given."""
    if _output_kind(path) == "npy":
        return _NpyWriter(path if file is None else file)
    return _TextWriter(path, file)


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
        writer = _writer(args.output, tmp)
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
