"""``fastkpca fit``: fit a model on a data file and save it."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

from ..decomposition import estimator_class
from ..decomposition.exact import MATRIX_FREE_AUTO_MAX_N, check_exact_fits
from ..execution import available_memory_bytes
from ..execution.progress import heartbeat
from ..persistence import is_model_file, save_model
from ..source.files import read_data
from ._common import (
    DEFAULT_MODEL,
    CLIError,
    _check_output,
    _claim_output,
    _parse_value,
    _progress_enabled,
)
from ._data import (
    _BlockStream,
    _densify,
    _dtype_option,
    _open,
    _read_all,
    _require_dense,
    _subsample,
)
from ._parser import _METHOD_OPTIONS
from .evaluate import _describe_estimate, _estimate, _estimate_lines

#: Estimators fitted on the file's row blocks (one pass, or two reading the file again).
ONE_PASS = {"StreamingKPCA", "RandomFeatureKPCA"}


def _fit_params(args, cls) -> dict:
    accepted = cls().get_params()
    params = {"random_state": args.seed}
    if getattr(args, "device", None) is not None and "device" in accepted:
        params["device"] = args.device
    if args.components is not None:
        params["n_components"] = args.components
    for name in ("kernel", "gamma", "degree", "coef0", "nu"):
        value = getattr(args, name)
        if value is not None:
            params[name] = value
    for flag, name, _, _ in _METHOD_OPTIONS:
        value = getattr(args, name)
        if value is None:
            continue
        if name not in accepted:
            raise CLIError(f"{flag} does not apply to --method {args.method} ({cls.__name__})")
        params[name] = value
    for name in ("memory_budget", "time_budget"):  # AutoKPCA's budgets
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in accepted:
            flag = "--" + name.replace("_", "-")
            raise CLIError(f"{flag} applies to --method auto only, not {args.method}")
        params[name] = value
    for item in args.param or []:
        name, sep, text = item.partition("=")
        if not sep:
            raise CLIError(f"--param expects NAME=VALUE, got {item!r}")
        name = name.strip().replace("-", "_")
        if name not in accepted:
            raise CLIError(
                f"{cls.__name__} has no parameter {name!r} (parameters: "
                f"{', '.join(sorted(accepted))})"
            )
        params[name] = _parse_value(text)
    landmarks = params.get("landmarks")
    if isinstance(landmarks, str) and (
        Path(landmarks).is_file() or os.sep in landmarks or Path(landmarks).suffix
    ):
        X_land, _ = read_data(landmarks, dtype=_dtype_option(args))
        params["landmarks"] = _densify(X_land, True, f"the landmark file {landmarks}")
    return params


def _is_one_pass(cls, params) -> bool:
    """Whether the model is fitted on the file's row blocks rather than on the loaded array."""
    if cls.__name__ == "NystromKPCA":
        # given landmarks: one pass; uniform: reservoir sampling, then (covariance="data") a
        # second pass over the file; kmeans / rls need the rows in memory
        landmarks = params.get("landmarks", "uniform")
        return isinstance(landmarks, np.ndarray) or landmarks == "uniform"
    return cls.__name__ in ONE_PASS


#: A row count estimated from a text file's size may be this many times too large: what is
#: refused on an estimate would not fit with this many times fewer rows either.
ESTIMATE_MARGIN = 2

#: AutoKPCA reads DATA into memory when its rows take at most this fraction of the memory
#: available; larger files are handed to it as a stream of row blocks, read again as needed.
AUTO_IN_MEMORY_FRACTION = 0.25


def _check_before_reading(cls, params, reader, path, *, in_memory: bool) -> bool:
    """Refuse, before reading DATA, a fit that cannot fit in memory where the row count is
    known up front (a ``.npy`` header, a Parquet file's metadata) or can be estimated (a text
    file's size over the length of its first lines): the rows of a method that reads them into
    memory, exact KPCA's n x n Gram.  For AutoKPCA, which chooses a method that fits, whether
    the rows are to be streamed rather than read into memory."""
    n = reader.rows_estimate()
    if n is None:
        return False
    estimated = reader.n_samples is None
    d, dtype = reader.n_features, reader.dtype
    if cls.__name__ == "AutoKPCA":
        return n * d * dtype.itemsize > AUTO_IN_MEMORY_FRACTION * available_memory_bytes()
    n_sure = max(1, n // ESTIMATE_MARGIN) if estimated else n
    rows = f"{n:,} rows"
    if estimated:
        rows = f"about {rows}, estimated from its size (the check counts {n_sure:,} of them)"
    try:
        if in_memory:
            _require_dense(n_sure, d, dtype, f"{path}'s rows")
        solver = params.get("eigen_solver", "auto")
        if cls.__name__ == "ExactKPCA" and solver != "matrix_free":
            if solver != "auto" or n_sure > MATRIX_FREE_AUTO_MAX_N:
                check_exact_fits(_Shape((n_sure, d), dtype))
    except ValueError as exc:
        raise CLIError(
            f"{exc} (refused before reading {path}: {rows}; --method auto, the default, "
            "chooses a method and size that fit)"
        ) from None
    return False


class _Shape:
    """What the memory checks read of rows not yet read: their shape and dtype."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def _data_info(reader, args) -> dict:
    """What the model file records about its training file: feature column names, label."""
    names = reader.feature_names
    info: dict = {"format": reader.format}
    if names is not None and all(isinstance(n, str) for n in names):
        info["columns"] = list(names)
    label = reader.label_index
    if label is not None:
        info["label_column"] = reader.column_names[label] if reader.column_names else label
    if reader.format == "libsvm":
        # how the file numbered its features: transform reads files for this model the same way
        info["libsvm_index_base"] = reader.index_base
    return info


def _claim_model_output(args) -> str | None:

    try:
        return _claim_output(
            args.output, force=args.force, kind="fastkpca model", ours=is_model_file
        )
    except CLIError as exc:
        if args.output_given:
            raise
        raise CLIError(f"{exc} ({DEFAULT_MODEL} is the default output of fit)") from None


def run(args):
    args.output_given = args.output is not None
    if args.output is None:
        args.output = DEFAULT_MODEL
    landmarks = args.landmarks if args.landmarks and Path(args.landmarks).is_file() else None
    _check_output(args.output, data=args.data, landmarks=landmarks)
    _claim_model_output(args)
    cls = estimator_class(args.method)
    params = _fit_params(args, cls)
    model = cls(**params)
    reader = _open(args, args.data)
    dense = not getattr(cls, "_accepts_sparse", False)
    t0 = time.perf_counter()
    shown = _progress_enabled(args)
    one_pass = _is_one_pass(cls, params) and not args.in_memory
    stream_auto = _check_before_reading(cls, params, reader, args.data, in_memory=not one_pass)
    if stream_auto and not args.in_memory:
        one_pass = True
    if one_pass:
        stream = _BlockStream(
            reader, args, dense=dense, desc=f"fitting {cls.__name__} on {args.data}"
        )
        # each pass over the file counts its rows; the steps between passes have a heartbeat
        with heartbeat(f"fitting {cls.__name__}", enabled=shown):
            model.fit(stream)
        n_rows, how = stream.n_rows or reader.n_samples, "streamed"
    else:
        with heartbeat(f"fitting {cls.__name__} on {args.data}", enabled=shown):
            X = _read_all(reader, args, dense=dense, desc=f"reading {args.data}")
            model.fit(X)
        n_rows, how = X.shape[0], "in memory"
    seconds = time.perf_counter() - t0

    info = _data_info(reader, args)
    if "columns" in info:
        # scikit-learn's record of the input's column names: transform checks them
        model.feature_names_in_ = np.asarray(info["columns"], dtype=object)
    replacing = _claim_model_output(args)  # again: the file may have appeared during the fit
    save_model(model, args.output, data=info)
    if replacing:
        print(replacing, file=sys.stderr)
    k = getattr(model, "n_components_", None)
    chosen = f", method {model.method_} chosen" if hasattr(model, "method_") else ""
    print(
        f"fitted {cls.__name__} ({k} components, kernel {model.kernel_!r}{chosen}) on {n_rows} "
        f"rows x {reader.n_features} features ({how}) in {seconds:.2f} s -> {args.output}"
    )
    if args.estimate_error:
        rng = np.random.default_rng(0 if args.seed is None else args.seed)
        X_probe, n = _subsample(reader, args, args.estimate_rows, rng)
        m = X_probe.shape[0]
        print(f"error estimate on {m} of {n} rows ({'all' if m == n else 'a uniform subsample'}):")
        print(_estimate_lines(_describe_estimate(_estimate(model, X_probe, args), n)))
    return 0
