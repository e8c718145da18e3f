"""DATA, the command's input file: opened with the command's options, its columns matched to a
model's, streamed in row blocks or read whole, subsampled."""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import scipy.sparse as sp

from ..execution import require_memory
from ..execution.progress import Progress
from ..source.files import detect_format, open_data
from ._common import CLIError, _parse_column, _progress_enabled


def _reader_options(args) -> dict:
    opts: dict = {"block_rows": args.block_rows, "dtype": _dtype_option(args)}
    if args.format:
        opts["format"] = args.format
    if args.label_column is not None:
        opts["label_column"] = _parse_column(args.label_column)
    if args.columns:
        opts["columns"] = [_parse_column(c) for c in args.columns.split(",") if c.strip()]
    if args.header != "auto":
        opts["header"] = args.header == "yes"
    if args.max_line_length is not None:
        opts["max_line_length"] = args.max_line_length
    return opts


def _index_base_option(args) -> int | None:
    """``--libsvm-index-base``: 0, 1, or None (auto)."""
    value = getattr(args, "libsvm_index_base", "auto")
    return None if value == "auto" else int(value)


def _dtype_option(args):
    """``--dtype``: float64, float32, or auto (float32 files stay float32, others float64)."""
    return "auto" if args.dtype == "auto" else np.dtype(args.dtype)


def _open(args, path, n_features=None, index_base=None, **extra):
    """Open DATA; for a LIBSVM file, ``n_features`` (a model's width) fixes the block width and
    ``index_base`` (the model's feature numbering, 0 or 1) how its indices are read."""

    opts = {**_reader_options(args), **extra}
    fmt = opts.get("format") or detect_format(path, max_line_length=opts.get("max_line_length"))
    if fmt in ("text", "csv", "tsv"):
        opts.setdefault("header", "auto")
    else:
        opts.pop("header", None)
        if args.header != "auto":
            raise CLIError(f"--header applies to delimited text, not to {fmt} files")
    if fmt in ("npy", "parquet", "pq") and opts.pop("max_line_length", None) is not None:
        raise CLIError(f"--max-line-length applies to text and LIBSVM files, not to {fmt} files")
    width = n_features or getattr(args, "libsvm_features", None)
    base = _index_base_option(args)
    if fmt in ("libsvm", "svmlight"):
        if index_base is not None:
            if base is not None and base != index_base:
                raise CLIError(
                    f"--libsvm-index-base {base}: the model's LIBSVM training file numbered its "
                    f"features from {index_base}, and {path} is read the same way"
                )
            base = index_base
        if base is not None:
            opts["zero_based"] = base == 0
        if width:
            opts["max_features"] = width
    else:
        if getattr(args, "libsvm_features", None):
            raise CLIError(f"--libsvm-features applies to LIBSVM files, not to {fmt} files")
        if base is not None:
            raise CLIError(f"--libsvm-index-base applies to LIBSVM files, not to {fmt} files")
    reader = open_data(path, **opts)
    if fmt in ("libsvm", "svmlight") and width and reader.n_features < width:
        # a LIBSVM file whose rows never reach the model's last features: widen its blocks,
        # keeping the index base found by the scan
        opts.pop("max_features", None)
        opts["zero_based"] = reader.zero_based
        reader = open_data(path, n_features=width, **opts)
    return reader


def _require_dense(n_rows, width, dtype, what):
    """Refuse up front ``n_rows`` dense rows of ``width`` features that cannot fit in memory."""

    require_memory(
        int(n_rows) * int(width) * np.dtype(dtype).itemsize,
        f"{what} as dense rows ({n_rows} x {width} {np.dtype(dtype).name})",
        hint=f"the rows are {width} features wide (a LIBSVM file's largest feature index "
        "sets the width)",
    )


def _densify(block, dense: bool, what="a block of DATA"):
    if dense and hasattr(block, "toarray"):
        _require_dense(block.shape[0], block.shape[1], block.dtype, what)
        return block.toarray()
    return block


class _BlockStream:
    """A re-iterable of a reader's feature blocks with a progress bar and optional densifying."""

    def __init__(self, reader, args, *, dense, desc):
        self.reader, self.args, self.dense, self.desc = reader, args, dense, desc
        self.n_rows = 0

    @property
    def n_samples(self) -> int | None:
        """The reader's row count when known up front (what ``BlockSource`` reads, so that the
        estimators' size-dependent choices, e.g. ``solver="auto"``, match an in-memory fit)."""
        return self.reader.n_samples

    def progress(self) -> Progress:
        """The progress of a pass: rows of a known total, else bytes of the file (a text file's
        rows are known only at its end)."""
        reader, enabled = self.reader, _progress_enabled(self.args)
        if reader.n_samples is None and getattr(reader, "bytes_read", None) is not None:
            return Progress(self.desc, total=reader.size_bytes, unit="B", enabled=enabled)
        return Progress(self.desc, total=reader.n_samples, enabled=enabled)

    def __iter__(self):
        n = 0
        with self.progress() as progress:
            by_bytes = progress.unit == "B"
            done = 0
            for block in self.reader:
                n += block.shape[0]
                if by_bytes:
                    position = self.reader.bytes_read or done
                    progress.update(position - done, rows=n)
                    done = position
                else:
                    progress.update(block.shape[0])
                yield _densify(block, self.dense)
            if by_bytes and progress.total and done < progress.total:
                progress.update(progress.total - done, rows=n)
        self.n_rows = n


def _read_all(reader, args, *, dense, desc="reading"):
    """The whole file as one array (CSR for LIBSVM unless ``dense``), with a progress bar."""

    stream = _BlockStream(reader, args, dense=dense, desc=desc)
    if dense and reader.format == "libsvm" and reader.n_samples is not None:
        _require_dense(reader.n_samples, reader.n_features, reader.dtype, str(reader.path))
    if reader.n_samples is not None and reader.format != "libsvm":
        # known length (npy, parquet): fill one array instead of holding blocks and a copy
        X = np.empty((reader.n_samples, reader.n_features), dtype=reader.dtype)
        start = 0
        for block in stream:
            X[start : start + block.shape[0]] = block
            start += block.shape[0]
        return X
    if reader.format != "libsvm":
        # unknown length (text): one array grown in place as the rows come, from the estimated
        # row count, rather than the blocks and then a copy of them all (twice the memory)
        return _fill_growing(stream, reader)
    blocks = list(stream)
    if not blocks:
        raise CLIError(f"{reader.path}: no data rows")
    if sp.issparse(blocks[0]):
        return sp.vstack(blocks, format="csr")
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


def _fill_growing(stream, reader) -> np.ndarray:
    """The dense rows of ``stream`` in one array, allocated for the reader's estimated row count
    (plus 5 %) and resized in place (``ndarray.resize``: realloc, no second copy) when the
    estimate falls short and at the end."""
    estimate = reader.rows_estimate() or reader.block_rows
    X = np.empty((max(1, int(estimate * 1.05)), reader.n_features), dtype=reader.dtype)
    start = 0
    for block in stream:
        stop = start + block.shape[0]
        if stop > X.shape[0]:
            X.resize((max(stop, int(X.shape[0] * 1.5)), X.shape[1]), refcheck=False)
        X[start:stop] = block
        start = stop
    if start == 0:
        raise CLIError(f"{reader.path}: no data rows")
    X.resize((start, X.shape[1]), refcheck=False)
    return X


def _check_width(model, reader):
    expected = getattr(model, "n_features_in_", None)
    if expected is not None and reader.n_features != expected:
        hint = ""
        if reader.n_features == expected + 1 and not reader.has_labels:
            hint = " (is one column a label? use --label-column)"
        raise CLIError(
            f"{reader.path} has {reader.n_features} feature columns, the model was "
            f"fitted on {expected}{hint}"
        )


def _open_for_model(args, model, meta):
    """Open DATA with the model's feature columns: by name where both sides have names.

    A model fitted on named columns (a CSV header, a Parquet schema, a DataFrame) selects the
    same names from DATA, in the model's order, so a file whose columns are swapped is
    reordered and one that lacks a column is refused; explicit ``--columns`` must name the
    model's columns in its order.  Without names on one side columns go by position (a note on
    stderr says so when the model has names), with the width checked.
    """
    names = getattr(model, "feature_names_in_", None)
    names = None if names is None else [str(n) for n in names]
    width = getattr(model, "n_features_in_", None)
    data = meta.get("data") or {}
    base = data.get("libsvm_index_base")
    extra = {"index_base": base}
    if names is not None and not args.columns:
        probe = _open(args, args.data, width, index_base=base)
        if probe.column_names is not None:
            missing = [n for n in names if n not in probe.column_names]
            if missing:
                raise CLIError(
                    f"{args.data} has no column(s) {', '.join(map(repr, missing[:10]))}; the "
                    f"model was fitted on columns {', '.join(names[:20])}"
                )
            extra["columns"] = names  # a label column of DATA is simply not selected
        else:
            print(
                f"fastkpca: note: {args.data} has no column names; its columns are taken by "
                f"position as the model's {', '.join(names[:10])}"
                f"{', ...' if len(names) > 10 else ''}",
                file=sys.stderr,
            )
    elif (
        names is None
        and args.label_column is None
        and not args.columns
        and isinstance(data.get("label_column"), int)
    ):
        # a headerless training file with a label column given by number: the same column of
        # DATA is its label when DATA is one column wider than the model
        probe = _open(args, args.data, width, index_base=base)
        if width is not None and probe.n_features == width + 1 and not probe.has_labels:
            extra["label_column"] = data["label_column"]
    reader = _open(args, args.data, width, **extra)
    if reader.format == "libsvm" and base is None and _index_base_option(args) is None:
        print(
            f"fastkpca: note: {args.model} does not record how its training file numbered "
            f"LIBSVM features; {args.data} is read as numbered from {reader.index_base} "
            "(--libsvm-index-base sets it)",
            file=sys.stderr,
        )
    if names is not None and reader.feature_names is not None and args.columns:
        if list(reader.feature_names) != names:
            raise CLIError(
                f"--columns selects {', '.join(reader.feature_names[:10])}, but the model was "
                f"fitted on columns {', '.join(names[:10])} (in that order)"
            )
    _check_width(model, reader)
    return reader


@contextlib.contextmanager
def _on_arrays(model):
    """Within the block, ``model`` is called with arrays as it was fitted: without the column
    names that ``fit`` records from DATA's header (``feature_names_in_``), since the command
    line has matched DATA's columns to them already (or said that it could not) and hands the
    model plain arrays; so scikit-learn has no reason to warn that the rows have no names."""
    names = model.__dict__.pop("feature_names_in_", None)
    try:
        yield model
    finally:
        if names is not None:
            model.feature_names_in_ = names


def _use_jobs(args, model) -> None:
    """A loaded model's own ``n_jobs`` and ``device`` give way to ``--jobs`` and ``--device``."""
    params = model.get_params(deep=False)
    jobs = getattr(args, "jobs", None)
    if jobs is not None and "n_jobs" in params:
        model.set_params(n_jobs=jobs)
    device = getattr(args, "device", None)
    if device is not None and "device" in params:
        model.set_params(device=device)


def _subsample(reader, args, m, rng):
    """A uniform random subsample of at most m rows (two passes when the row count is unknown)."""
    n = reader.count_rows()
    keep = np.arange(n) if n <= m else np.sort(rng.choice(n, size=m, replace=False))
    # the rows are selected from each block before it is densified: a block of a wide LIBSVM
    # file is small as CSR and large dense
    _require_dense(keep.size, reader.n_features, reader.dtype, f"a sample of {keep.size} rows")
    parts, start = [], 0
    for block in _BlockStream(reader, args, dense=False, desc=f"sampling {reader.path}"):
        stop = start + block.shape[0]
        lo, hi = np.searchsorted(keep, [start, stop])
        if hi > lo:
            rows = block[keep[lo:hi] - start]
            parts.append(rows.toarray() if hasattr(rows, "toarray") else rows)
        start = stop
    return np.concatenate(parts), n
