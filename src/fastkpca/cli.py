"""The ``fastkpca`` command (also ``python -m fastkpca``).

::

    fastkpca fit DATA --method nystrom --components 5 --kernel rbf --gamma 0.01 -o model.npz
    fastkpca transform model.npz DATA -o projections.npy
    fastkpca evaluate model.npz DATA
    fastkpca info model.npz
    fastkpca bench [--quick] [--out DIR] [NAME ...]
    fastkpca demo [--output fastkpca-demo.png]

DATA is a ``.npy``, ``.csv`` / ``.tsv`` (optionally gzipped), ``.parquet`` or LIBSVM file, read
by :mod:`fastkpca.source.files`.  The block-wise methods (streaming, random-features, nystrom with
uniform landmarks or a landmark file) are fitted on the file's row blocks without loading it, so
memory is bounded by the block size and the model, not the file; where a method needs a second
pass (nystrom's covariance after reservoir-sampling the landmarks, the countsketch solver's
Rayleigh-Ritz step) it reads the file again.  The others read it into memory.
Errors are reported on one line (``fastkpca: error: ...``, exit status 1), and so is each warning
of the library (``fastkpca: warning: ...``, e.g. a degenerate kernel); ``--debug`` shows the
traceback and Python's warnings instead.  Progress bars (tqdm) appear only when stderr is a
terminal.  The help of every option is built from the estimators themselves (the methods that
take it, their choices and defaults), so it cannot drift from what the code accepts.

Files are safe from the command's mistakes.  No command overwrites a file it did not write:
``fit`` replaces an existing output only when it is a fastkpca model (recognised by its
metadata, :func:`fastkpca.persistence.is_model_file`), ``demo`` only its own plot, ``bench``
only the files it recorded writing in its ``--out`` folder, ``transform`` no existing file;
``--force`` replaces any regular file, and a replacement is said on stderr
(``fastkpca: replacing the fastkpca model model.npz``).  ``-o`` naming an input file (the same
path, a link or the same inode) is refused even with ``--force``.  Models, projections and
plots are written to a temporary file renamed at the end, so a failure leaves an existing
output as it was; SIGTERM and SIGHUP end the command like an error (exit status 128 + the
signal's number), so the temporary file is removed then too.  A model file records its
training file's column names, label column and, for a LIBSVM file, its feature numbering;
``transform`` and ``evaluate`` select DATA's columns by those names (reordering swapped
columns, refusing missing ones) and read a LIBSVM DATA with the same numbering.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .decomposition import METHODS, estimator_class

__all__ = ["main", "build_parser", "METHODS"]

#: Estimators fitted on the file's row blocks (one pass, or two reading the file again).
ONE_PASS = {"StreamingKPCA", "RandomFeatureKPCA"}

#: The method options of ``fit``: (flag, estimator parameter, value parser, help).  Which methods
#: take each one, its choices and its default are read from the estimators when the parser is
#: built (:func:`_method_option_help`), so the help says what the code accepts.
_METHOD_OPTIONS = [
    ("--eigen-solver", "eigen_solver", str, "eigensolver"),
    (
        "--n-features",
        "n_features",
        "size",
        "number of random features m, or 'auto' (grown until --tol is met)",
    ),
    ("--features", "features", str, "random feature map ('auto': by kernel)"),
    ("--solver", "solver", str, "how the principal axes are computed"),
    (
        "--sketch-size",
        "sketch_size",
        int,
        "sketch size: Frequent Directions rows ell (streaming), columns q of the randomized "
        "solver's test matrix (nystrom)",
    ),
    (
        "--n-landmarks",
        "n_landmarks",
        "size",
        "number of landmarks c, or 'auto' (grown until --tol is met)",
    ),
    ("--landmarks", "landmarks", str, "landmark choice, or a data file of landmark rows"),
    ("--density", "density", str, "reduced-set density estimate"),
    ("--n-centers", "n_centers", int, "number of centers (densities other than shadow)"),
    ("--ell", "ell", float, "shadow density parameter ell (eps = sigma / ell)"),
    ("--sample-prob", "sample_prob", float, "probability of keeping each Gram entry"),
    ("--quantize", "quantize", "bool", "1-bit quantization of the kept entries: true or false"),
    (
        "--tol",
        "tol",
        float,
        "grow the model until its relative rank-k error is at most 1 + TOL (the estimate plus "
        "2 standard errors)",
    ),
    ("--eigen-tol", "eigen_tol", float, "iterative eigensolver tolerance"),
    ("--max-iter", "max_iter", int, "iterative eigensolver iteration limit"),
]


def _parameter_choices() -> dict:
    """(estimator class name, parameter) -> the values the estimator accepts, from its module's
    own constants (what the method options' help and choices are built from)."""
    from ._landmarks import LANDMARK_METHODS
    from .decomposition import exact, nystrom, random_features, reduced_set, sparsified
    from .features import FEATURES

    return {
        ("ExactKPCA", "eigen_solver"): exact.EXACT_SOLVERS,
        ("ReducedSetKPCA", "eigen_solver"): reduced_set.SOLVERS,
        ("SparsifiedKPCA", "eigen_solver"): sparsified.EIGEN_SOLVERS,
        ("RandomFeatureKPCA", "features"): ("auto", *FEATURES),
        ("StreamingKPCA", "features"): ("auto", *FEATURES),
        ("RandomFeatureKPCA", "solver"): random_features.SOLVERS,
        ("NystromKPCA", "solver"): nystrom.SOLVERS,
        ("NystromKPCA", "landmarks"): LANDMARK_METHODS,
        ("ReducedSetKPCA", "density"): reduced_set.DENSITIES,
    }


def _none_defaults() -> dict:
    """(estimator class name, parameter) -> what a default of None means, for the help."""
    from .decomposition import nystrom, reduced_set, streaming
    from .features import DEFAULT_N_FEATURES

    solver_default = "the solver's own (by dtype)"
    no_growth = "none (the size given)"
    return {
        ("RandomFeatureKPCA", "n_features"): str(DEFAULT_N_FEATURES),
        ("StreamingKPCA", "n_features"): str(DEFAULT_N_FEATURES),
        ("NystromKPCA", "n_landmarks"): f"min({nystrom.DEFAULT_N_LANDMARKS}, rows)",
        ("StreamingKPCA", "sketch_size"): f"max({streaming.DEFAULT_SKETCH_SIZE}, 2 k)",
        ("NystromKPCA", "sketch_size"): f"{nystrom.SKETCH_FACTOR} k + {nystrom.SKETCH_EXTRA}",
        ("ReducedSetKPCA", "n_centers"): f"min({reduced_set.DEFAULT_N_CENTERS}, rows)",
        ("ExactKPCA", "eigen_tol"): solver_default,
        ("SparsifiedKPCA", "eigen_tol"): solver_default,
        ("NystromKPCA", "tol"): no_growth,
        ("RandomFeatureKPCA", "tol"): no_growth,
        ("StreamingKPCA", "tol"): no_growth,
        ("ExactKPCA", "max_iter"): "the solver's own",
        ("SparsifiedKPCA", "max_iter"): "the solver's own",
    }


def _method_option_help(param: str, text: str, methods: dict) -> tuple[str, tuple | None]:
    """The help of a method option and its choices (None: any value), from the estimators:
    the methods that take ``param``, the values each accepts and each one's default."""
    choices, none_defaults = _parameter_choices(), _none_defaults()
    users = {m: cls for m, cls in methods.items() if param in cls._get_param_names()}
    allowed: dict = {}
    defaults: dict = {}
    for method, cls in users.items():
        for value in choices.get((cls.__name__, param), ()):
            allowed.setdefault(value, []).append(method)
        default = cls().get_params()[param]
        shown = none_defaults.get((cls.__name__, param), "none") if default is None else default
        defaults.setdefault(str(shown).lower() if isinstance(shown, bool) else shown, []).append(
            method
        )
    parts = [f"{text} [{', '.join(users)}]"]
    if allowed:
        listed = [
            v if len(ms) == len(users) else f"{v} ({', '.join(ms)})" for v, ms in allowed.items()
        ]
        parts.append("choices: " + ", ".join(map(str, listed)))
    if len(defaults) == 1:
        parts.append(f"default: {next(iter(defaults))}")
    else:
        parts.append(
            "default: " + "; ".join(f"{v} ({', '.join(ms)})" for v, ms in defaults.items())
        )
    return "; ".join(parts), (tuple(allowed) if allowed and param != "landmarks" else None)


def _parse_bool(text: str) -> bool:
    value = _parse_value(text)
    if not isinstance(value, bool):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def _parse_size(text: str):
    """A size option: a positive integer or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer or 'auto', got {text!r}"
        ) from None


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with each option's default: "(default: X)" appended where the text does
    not already say it; flags (``store_true``) and required options say nothing."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            not action.option_strings
            or action.required
            or action.nargs == 0
            or action.default in (None, argparse.SUPPRESS)
            or "default" in text.lower()
        ):
            return text
        return f"{text} (default: %(default)s)"


#: The model file ``fit`` writes without ``-o`` (a model file is a NumPy ``.npz`` archive).
DEFAULT_MODEL = "model.npz"

_DATA_HELP = "data file: .npy, .csv / .tsv (optionally .gz), .parquet or LIBSVM text"
_MODEL_HELP = "model file written by fastkpca fit (or model.save)"


class CLIError(Exception):
    """An error reported to the user as one line."""


class _Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the command is, so that cleanup runs (``finally``
    blocks, the removal of temporary output files) and the command exits with 128 + signal.

    A BaseException, like KeyboardInterrupt: ``except Exception`` does not swallow it.
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame):
    signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process at once
    raise _Terminated(signum)


@contextlib.contextmanager
def _signals_end_like_errors():
    """Within the block, SIGTERM and SIGHUP (where the platform has it) raise
    :class:`_Terminated`; a signal that was ignored (``nohup``) stays ignored.  Outside the
    main thread signals cannot be handled, and the block runs as it is."""
    installed = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is None or signal.getsignal(signum) is signal.SIG_IGN:
            continue
        try:
            installed[signum] = signal.signal(signum, _raise_terminated)
        except ValueError:  # not the main thread
            break
    try:
        yield
    finally:
        for signum, previous in installed.items():
            signal.signal(signum, previous)


# --- small helpers --------------------------------------------------------------------------------


def _parse_value(text: str):
    """A command-line value: int, float, true/false/none, else the string itself."""
    low = text.strip().lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _parse_gamma(text: str):
    if text in ("scale", "median"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"gamma must be a number, 'scale' or 'median', got {text!r}"
        ) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _parse_column(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def _progress_enabled(args) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def _bar(args, total=None, desc=""):
    """A tqdm bar on stderr when it is a terminal, else a do-nothing stand-in."""
    if _progress_enabled(args):
        try:
            from tqdm import tqdm

            return tqdm(
                total=total, desc=desc, unit="rows", unit_scale=True, file=sys.stderr, leave=False
            )
        except ImportError:
            pass
    return _NoBar()


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --- data -----------------------------------------------------------------------------------------


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
    from .source.files import detect_format, open_data

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


def _same_file(a, b) -> bool:
    """Whether two paths name one file (the same path, a link to it, or the same inode)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return os.path.realpath(a) == os.path.realpath(b)


def _check_output(output, **inputs):
    """Refuse an output path that names one of the command's input files."""
    for what, path in inputs.items():
        if path is not None and _same_file(output, path):
            raise CLIError(
                f"-o {output} is the {what} file {path}: writing it would destroy the input; "
                "choose another output name"
            )


def _claim_output(path, *, force: bool, kind: str | None = None, ours=None) -> str | None:
    """Check that the command may write ``path``; the stderr line to print if it replaces a file.

    A name that does not exist yet is free (a dangling link too: its target is created).  An
    existing regular file is replaced only when ``ours(path)`` recognises it as what the
    command writes (``kind``: "fastkpca model" for ``fit``), or with ``--force``; anything else
    (a folder, a device such as /dev/null, a pipe) is never replaced.  Called before the work,
    so a refusal costs nothing, and again just before the file is replaced.
    """
    target = Path(path)
    if not target.exists():
        return None
    if target.is_dir():
        raise CLIError(f"output {path} is a folder; give a file name (-o FILE)")
    if not target.is_file():
        raise CLIError(f"output {path} is not a regular file; fastkpca writes only files")
    if ours is not None and ours(target):
        return f"fastkpca: replacing the {kind} {path}"
    if force:
        return f"fastkpca: replacing {path} (--force)"
    what = f"exists and is not a {kind}" if kind else "exists"
    raise CLIError(
        f"output {path} {what}: fastkpca does not overwrite files it did not write; choose "
        "another name with -o, or give --force to replace it"
    )


def _is_demo_plot(path) -> bool:
    """Whether ``path`` is a PNG written by ``fastkpca demo`` (its Software text chunk says so).

    Reads the PNG chunks before the image data only, at most 64 KiB: cheap on any file.
    """
    from ._demo import DEMO_PLOT_SOFTWARE

    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    if not head.startswith(b"\x89PNG\r\n\x1a\n"):
        return False
    pos, marker = 8, b"Software\x00" + DEMO_PLOT_SOFTWARE.encode("latin-1")
    while pos + 8 <= len(head):
        length = int.from_bytes(head[pos : pos + 4], "big")
        kind = head[pos + 4 : pos + 8]
        if kind in (b"IDAT", b"IEND"):
            return False
        if kind == b"tEXt" and head[pos + 8 : pos + 8 + length] == marker:
            return True
        pos += 12 + length
    return False


def _require_dense(n_rows, width, dtype, what):
    """Refuse up front ``n_rows`` dense rows of ``width`` features that cannot fit in memory."""
    from .execution import require_memory

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

    def __iter__(self):
        n = 0
        with _bar(self.args, self.reader.n_samples, self.desc) as bar:
            for block in self.reader:
                n += block.shape[0]
                bar.update(block.shape[0])
                yield _densify(block, self.dense)
        self.n_rows = n


def _read_all(reader, args, *, dense, desc="reading"):
    """The whole file as one array (CSR for LIBSVM unless ``dense``), with a progress bar."""
    import scipy.sparse as sp

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
    blocks = list(stream)
    if not blocks:
        raise CLIError(f"{reader.path}: no data rows")
    if sp.issparse(blocks[0]):
        return sp.vstack(blocks, format="csr")
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


# --- fit ------------------------------------------------------------------------------------------


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
    for name in ("memory", "time"):  # AutoKPCA's budgets
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in accepted:
            raise CLIError(f"--{name} applies to --method auto only, not {args.method}")
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
        from .source.files import read_data

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
    from .persistence import is_model_file

    try:
        return _claim_output(
            args.output, force=args.force, kind="fastkpca model", ours=is_model_file
        )
    except CLIError as exc:
        if args.output_given:
            raise
        raise CLIError(f"{exc} ({DEFAULT_MODEL} is the default output of fit)") from None


def cmd_fit(args):
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
    if _is_one_pass(cls, params) and not args.in_memory:
        stream = _BlockStream(reader, args, dense=dense, desc=f"fitting {cls.__name__}")
        model.fit(stream)
        n_rows, how = stream.n_rows or reader.n_samples, "streamed"
    else:
        X = _read_all(reader, args, dense=dense)
        if _progress_enabled(args):
            print(f"fitting {cls.__name__} on {X.shape[0]} x {X.shape[1]} ...", file=sys.stderr)
        model.fit(X)
        n_rows, how = X.shape[0], "in memory"
    seconds = time.perf_counter() - t0
    from .persistence import save_model

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


# --- transform ------------------------------------------------------------------------------------


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
        from numpy.lib.format import dtype_to_descr

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
        import gzip

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


def _transform_quietly(model, X):
    """``model.transform(X)`` without scikit-learn's warning that X has no feature names: the
    command line has matched the columns by name (or said that it could not)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="X does not have valid feature names")
        return model.transform(X)


def cmd_transform(args):
    from .persistence import atomic_output, load_with_info

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
            for block in _BlockStream(reader, args, dense=dense, desc="transforming"):
                writer.write(_transform_quietly(model, block))
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


# --- evaluate -------------------------------------------------------------------------------------


def _subsample(reader, args, m, rng):
    """A uniform random subsample of at most m rows (two passes when the row count is unknown)."""
    n = reader.count_rows()
    keep = np.arange(n) if n <= m else np.sort(rng.choice(n, size=m, replace=False))
    # the rows are selected from each block before it is densified: a block of a wide LIBSVM
    # file is small as CSR and large dense
    _require_dense(keep.size, reader.n_features, reader.dtype, f"a sample of {keep.size} rows")
    parts, start = [], 0
    for block in _BlockStream(reader, args, dense=False, desc="sampling"):
        stop = start + block.shape[0]
        lo, hi = np.searchsorted(keep, [start, stop])
        if hi > lo:
            rows = block[keep[lo:hi] - start]
            parts.append(rows.toarray() if hasattr(rows, "toarray") else rows)
        start = stop
    return np.concatenate(parts), n


def evaluate_model(model, X, *, random_state=0) -> dict:
    """Errors of ``model`` on X against exact KPCA of X (same kernel, same k): two columns.

    ``model`` is the fitted model's error; ``exact`` is exact KPCA's own (the best any rank-k
    method can do on X: 1.0 for the relative rank-k error).  Eigenvalues compared per row, as
    ``fastkpca.metrics.estimate_error`` compares them: the model's ``eigenvalues_ / n_train``
    against the exact ``lambda / n`` of X's centered Gram (left out for a model that does not
    tell its eigenvalues and training size).
    """
    from . import metrics
    from .decomposition.exact import ExactKPCA

    kernel = model.kernel_
    T = np.asarray(_transform_quietly(model, X), dtype=np.float64)
    k = T.shape[1]
    ref = ExactKPCA(n_components=k, kernel=kernel, random_state=random_state)
    R = np.asarray(ref.fit_transform(X), dtype=np.float64)
    rows = {}
    for name, fn in (
        ("relative_rank_k_error", metrics.relative_rank_k_error),
        ("gram_spectral_error", metrics.gram_spectral_error),
        ("gram_frobenius_error", metrics.gram_frobenius_error),
    ):
        rows[name] = {"model": fn(X, T, kernel), "exact": fn(X, R, kernel)}
    rows["embedding_error"] = {"model": metrics.embedding_error(T, R), "exact": 0.0}
    try:
        per_row = metrics.eigenvalues_per_row(model)
    except ValueError:  # no eigenvalues_ or training size: no eigenvalue error to give
        return rows
    rows["eigenvalue_error"] = {
        "model": metrics.eigenvalue_error(per_row, ref.eigenvalues_ / X.shape[0]),
        "exact": 0.0,
    }
    return rows


_METRIC_NOTES = {
    "relative_rank_k_error": "||HGH - TT'||_F / ||HGH - (HGH)_k||_F (1 = optimal)",
    "gram_spectral_error": "||HGH - TT'||_2 / n",
    "gram_frobenius_error": "||HGH - TT'||_F / n^2",
    "embedding_error": "vs exact KPCA, Procrustes-aligned",
    "eigenvalue_error": "eigenvalues per row (lambda / n) vs exact ones of these rows",
}


def _rows_text(m: int, n: int) -> str:
    """Which rows a figure was computed on: all n of DATA, or a uniform subsample of m."""
    return f"all {n} rows" if m == n else f"a uniform random subsample of {m} of the {n} rows"


#: ``"method"`` of each entry of an evaluation: how the figure was computed.
EXACT_ALL_ROWS = "exact_all_rows"  # exact, on every row of DATA
EXACT_SUBSAMPLE = "exact_subsample"  # exact on the evaluated rows, a uniform subsample of DATA
PROBE_ESTIMATE = "probe_estimate"  # estimated from a probe of the evaluated rows (with stderr)


def _describe_estimate(est: dict, n_rows: int) -> dict:
    """``estimate_error``'s result with each entry saying how it was computed.

    ``estimate_error`` computes the Gram of the rows it is given exactly when they are at most
    ``n_probe`` (its ``"method": "exact"``), else estimates from a probe (``"probe"``).  Here the
    rows are DATA's, all or a uniform subsample: each entry's ``"method"`` becomes one of
    :data:`EXACT_ALL_ROWS`, :data:`EXACT_SUBSAMPLE`, :data:`PROBE_ESTIMATE`, and a
    ``"computation"`` says it in words.
    """
    out = dict(est)
    m, p = int(est["n_samples"]), int(est["n_probe"])
    rows = _rows_text(m, n_rows)
    for name in (
        "relative_rank_k_error",
        "excess_error",
        "eigenvalue_error",
        "eigenvalues_per_row",
    ):
        entry = est.get(name)
        if not isinstance(entry, dict):
            continue
        entry = dict(entry)
        if entry.get("method") == "probe":
            entry["method"] = PROBE_ESTIMATE
            entry["computation"] = (
                f"estimated from a uniform probe of {p} of the {m} evaluated rows ({rows} of "
                "DATA), without exact KPCA; stderr and a 95% interval"
            )
        else:
            entry["method"] = EXACT_ALL_ROWS if m == n_rows else EXACT_SUBSAMPLE
            entry["computation"] = f"exact, on the Gram of {rows} of DATA"
        if name in ("eigenvalue_error", "eigenvalues_per_row"):
            entry["computation"] += (
                "; eigenvalues per row (lambda / n) of these rows against the model's, whose "
                "stderr counts the sampling of the rows"
                if m < n_rows
                else "; eigenvalues per row (lambda / n) of these rows against the model's"
            )
        out[name] = entry
    certificates = est.get("certificates")
    if isinstance(certificates, dict):
        how = {
            "nystrom_residual_trace": f"exact, over {rows} of DATA",
            "fd_eigenvalue_bounds": "from the model's Frequent Directions sketch (no rows)",
            "feature_gram_error": "on a uniform probe of the evaluated rows (its n_probe)",
        }
        out["certificates"] = {
            name: {**value, "computation": how[name]}
            if isinstance(value, dict) and name in how
            else value
            for name, value in certificates.items()
        }
    return out


def cmd_evaluate(args):
    from .persistence import load_with_info

    if args.max_samples < 2:
        raise CLIError(f"--max-samples must be at least 2, got {args.max_samples}")
    model, meta = load_with_info(args.model)
    _use_jobs(args, model)
    reader = _open_for_model(args, model, meta)
    rng = np.random.default_rng(args.seed)
    X, n = _subsample(reader, args, args.max_samples, rng)
    k = getattr(model, "n_components_", None) or model.eigenvalues_.shape[0]
    if X.shape[0] <= k:
        raise CLIError(f"{X.shape[0]} rows are too few to evaluate {k} components")
    m = X.shape[0]
    estimate = _describe_estimate(_plain(_estimate(model, X, args)), n)
    rows = None if args.no_exact else evaluate_model(model, X, random_state=args.seed)
    exact_how = f"exact KPCA (ExactKPCA, the model's kernel, {k} components) of {_rows_text(m, n)}"
    if rows is not None:
        method = EXACT_ALL_ROWS if m == n else EXACT_SUBSAMPLE
        for entry in rows.values():
            entry["method"] = method
            entry["computation"] = f"exact, against {exact_how}"
    if args.json:
        print(
            json.dumps(
                {
                    "model": args.model,
                    "data": args.data,
                    "n_rows": n,
                    "n_evaluated": m,
                    "rows": _rows_text(m, n),
                    "n_components": k,
                    "estimate": estimate,
                    "metrics": _plain(rows),
                    "metrics_computation": "skipped (--no-exact)" if rows is None else exact_how,
                },
                indent=2,
            )
        )
        return 0
    print(f"{type(model).__name__} ({k} components) on {m} of {n} rows of {args.data}")
    print(f"error estimate (fastkpca.metrics.estimate_error) on {_rows_text(m, n)}:")
    print(_estimate_lines(estimate))
    if rows is not None:
        print(f"against {exact_how}:")
        print(f"    {'metric':<24}{'model':>12}{'exact':>12}  meaning")
        for name, r in rows.items():
            print(f"    {name:<24}{r['model']:>12.4g}{r['exact']:>12.4g}  {_METRIC_NOTES[name]}")
    else:
        print("exact KPCA of the rows: skipped (--no-exact)")
    return 0


def _estimate(model, X, args) -> dict:
    """``fastkpca.metrics.estimate_error`` of the model on X (no exact KPCA of X)."""
    from .metrics import estimate_error

    n_probe = max(int(args.n_probe), 1)
    return estimate_error(model, X, n_probe=min(n_probe, X.shape[0]), random_state=args.seed)


def _estimate_lines(est: dict) -> str:
    """The error estimate, for people (:func:`_describe_estimate`'s dict): each figure with its
    uncertainty where it has one, and how it was computed.

    The eigenvalue error compares eigenvalues per row (``lambda / n``), the model's (of its
    training rows) with those of the rows given, a sample of the training rows or all of them;
    it is left out for a model that does not tell its eigenvalues and training size.
    """
    err, eig = est["relative_rank_k_error"], est["eigenvalue_error"]
    lo, hi = err["interval"]
    if err["method"] == PROBE_ESTIMATE:
        value = f"{err['estimate']:.4f}   (95% interval {lo:.4f}-{hi:.4f}; 1 = exact KPCA)"
        note = (
            "    (may understate err - 1 for models better than a Nystrom model with 3/4 of the "
            "probe as landmarks)"
        )
    else:
        value = f"{err['estimate']:.4f}   (1 = exact KPCA)"
        note = ""
    lines = [f"  relative rank-k error  {value}", f"    {err['computation']}"]
    if note:
        lines.append(note)
    if eig is not None:
        lines.append(f"  eigenvalue error       {eig['estimate']:.4g}   (+- {eig['stderr']:.2g})")
        lines.append(f"    {eig['computation']}")
    return "\n".join(lines)


def _plain(value):
    """A JSON-serialisable copy (arrays -> lists, numpy scalars -> numbers)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


# --- info -----------------------------------------------------------------------------------------


def _render(node):
    """A model-file metadata value, briefly."""
    if isinstance(node, dict):
        kind = node.get("kind")
        if kind in ("array", "scalar", "sparse"):
            return f"<{kind}>"
        if kind == "float":
            return node["value"]
        if kind == "kernel":
            return _render(node["config"])
        if kind in ("list", "tuple"):
            return "[" + ", ".join(_render(v) for v in node["items"]) + "]"
        if kind == "dict":
            return "{" + ", ".join(f"{k}: {_render(v)}" for k, v in node["items"].items()) + "}"
        if kind == "state":
            return f"<{node['class']}>"
        return "{" + ", ".join(f"{k}={v}" for k, v in node.items()) + "}"
    return repr(node)


def cmd_info(args):
    from .persistence import model_info

    meta = model_info(args.model)
    if args.json:
        print(json.dumps({k: v for k, v in meta.items() if k not in ("fitted",)}, indent=2))
        return 0
    kernel = meta.get("kernel") or {}
    kernel_text = ", ".join(f"{k}={v}" for k, v in kernel.items() if k != "kernel")
    fitted = meta.get("fitted", {})
    print(f"file:            {args.model} ({meta['file_bytes'] / 1024:.1f} KiB)")
    print(
        f"format:          {meta['format']} version {meta['format_version']} (fastkpca "
        f"{meta.get('fastkpca_version')}, numpy {meta.get('numpy_version')})"
    )
    print(f"estimator:       {meta['estimator']}")
    if kernel:
        print(
            f"kernel:          {kernel.get('kernel')}"
            + (f" ({kernel_text})" if kernel_text else "")
        )
    for name in ("n_features_in_", "n_components_", "n_samples_seen_"):
        if name in fitted:
            print(f"{name + ':':<17}{_render(fitted[name])}")
    eig = meta.get("eigenvalues")
    if eig is not None:
        print("eigenvalues:     " + " ".join(f"{v:.6g}" for v in eig))
    print(
        "parameters:      "
        + ", ".join(f"{k}={_render(v)}" for k, v in sorted(meta["params"].items()))
    )
    print("attributes:")
    for name, kind in sorted(meta.get("fitted_kinds", {}).items()):
        print(f"  {name:<24}{kind}")
    return 0


# --- bench ----------------------------------------------------------------------------------------


def _find_benchmarks(directory=None) -> Path | None:
    """The repository's ``benchmarks/`` folder (it is not part of the installed package)."""
    if directory:
        if not Path(directory).is_dir():
            raise CLIError(f"benchmarks folder not found: {directory}")
        return Path(directory)
    candidates = [Path.cwd() / "benchmarks"]
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file():
        candidates.append(root / "benchmarks")
    for path in candidates:
        if path.is_dir() and any(path.glob("*.py")):
            return path
    return None


def _benchmark_scripts(folder: Path) -> dict:
    return {p.stem: p for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")}


def _first_doc_line(path: Path) -> str:
    import ast

    try:
        doc = ast.get_docstring(ast.parse(path.read_text()))
    except (SyntaxError, UnicodeDecodeError):
        return ""
    return doc.strip().splitlines()[0] if doc else ""


def _has_quick_mode(path: Path) -> bool:
    """Whether a benchmark script takes ``--quick`` (small sizes, seconds instead of minutes)."""
    try:
        return '"--quick"' in path.read_text()
    except (OSError, UnicodeDecodeError):
        return False


def _run_script(cmd, **kwargs) -> int:
    """Run a benchmark script; when this command is interrupted or terminated, the script is
    asked to stop (SIGTERM, so that it cleans up) before the interruption goes on."""
    with subprocess.Popen(cmd, **kwargs) as proc:
        try:
            return proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise


#: The environment variable the benchmark scripts read for their results folder (their harness,
#: ``benchmarks/_harness.py``, defines the same name); ``bench --out`` sets it.
BENCH_RESULTS_ENV = "FASTKPCA_BENCH_RESULTS"

#: How long ``fastkpca bench --quick`` takes, as measured (said in its help): 18 scripts in
#: 17.7 minutes on a 2-core machine whose load average was 2.5-3.8 (other work running).
BENCH_QUICK_TIME = "about 18 minutes on a 2-core machine"

#: ``bench --out``'s default: a folder of the current directory, never the package or the
#: repository's own ``benchmarks/results/``.
DEFAULT_BENCH_OUT = "fastkpca-bench-results"

#: The record, in a results folder, of the files ``fastkpca bench`` wrote there: the files it may
#: replace on a later run.
BENCH_MANIFEST = "fastkpca-bench.json"
_BENCH_FORMAT = "fastkpca-bench-results"


def _folder_files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` (relative POSIX path -> (size, mtime in ns)); {} if none."""
    out: dict[str, tuple[int, int]] = {}
    if not folder.is_dir():
        return out
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            out[path.relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def _bench_manifest(folder: Path) -> dict | None:
    """The files ``fastkpca bench`` recorded as its own in ``folder`` (name -> script), or None
    when the folder has no readable record."""
    path = folder / BENCH_MANIFEST
    try:
        if not path.is_file() or path.stat().st_size > 2**24:  # a record is a few KiB
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _BENCH_FORMAT:
        return None
    files = data.get("files")
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else None


def _write_bench_manifest(folder: Path, files: dict) -> None:
    from .persistence import atomic_output

    text = json.dumps({"format": _BENCH_FORMAT, "files": dict(sorted(files.items()))}, indent=2)
    with atomic_output(folder / BENCH_MANIFEST) as tmp:
        Path(tmp).write_text(text + "\n")


def _claim_bench_folder(out: Path, *, force: bool) -> dict:
    """Check that the benchmarks may write into ``out``; the files recorded as ``bench``'s own.

    The rule of ``fit -o``: a folder that does not exist yet is free, and so is one holding only
    files an earlier ``fastkpca bench`` wrote (its record, :data:`BENCH_MANIFEST`, lists them);
    any other file in it could be replaced by a script's results, so such a folder is refused
    unless ``--force``.  The package's own folder is always refused.
    """
    package = Path(__file__).resolve().parent
    resolved = out.resolve()
    if resolved == package or package in resolved.parents:
        raise CLIError(f"--out {out} is inside the fastkpca package; choose another folder")
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} exists and is not a folder")
    record = _bench_manifest(out)
    owned = record or {}
    ours = set(owned) | ({BENCH_MANIFEST} if record is not None else set())
    foreign = sorted(set(_folder_files(out)) - ours)
    if foreign and not force:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise CLIError(
            f"--out {out} holds files fastkpca bench did not write ({shown}): the benchmarks "
            "could replace them; choose another folder with --out, or give --force"
        )
    if foreign:
        print(f"fastkpca: writing into {out}, which holds other files (--force)", file=sys.stderr)
    return owned


def cmd_bench(args):
    folder = _find_benchmarks(args.dir)
    if folder is None:
        raise CLIError(
            "fastkpca bench runs the scripts in the repository's benchmarks/ folder, "
            "which is not installed with the package: run it from a source checkout "
            "of fastkpca (or pass --dir PATH)"
        )
    scripts = _benchmark_scripts(folder)
    if not scripts:
        raise CLIError(f"no benchmark scripts in {folder}")
    if args.list:
        for name, path in scripts.items():
            quick = "" if _has_quick_mode(path) else " (no --quick mode)"
            print(f"{name:<28}{_first_doc_line(path)}{quick}")
        return 0
    names = [n[:-3] if n.endswith(".py") else n for n in args.names] or list(scripts)
    unknown = [n for n in names if n not in scripts]
    if unknown:
        raise CLIError(f"unknown benchmark {', '.join(unknown)}; available: {', '.join(scripts)}")
    out = Path(os.path.abspath(args.out))
    owned = _claim_bench_folder(out, force=args.force)
    extra = list(args.script_args)
    if args.quick:
        extra = ["--quick", *extra]
    env = dict(os.environ)
    env[BENCH_RESULTS_ENV] = str(out)
    src = folder.parent / "src"
    if (src / "fastkpca").is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    failed = []
    skipped = []
    for name in names:
        if args.quick and not _has_quick_mode(scripts[name]):
            # never fall back to a full-size run (some take hours) when a quick one was asked for
            print(f"== {name}: skipped (the script has no --quick mode)", flush=True)
            skipped.append(name)
            continue
        cmd = [sys.executable, str(scripts[name]), *extra]
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        before = _folder_files(out)
        try:
            rc = _run_script(cmd, cwd=folder.parent, env=env)
        finally:
            # what the script wrote (even when it failed or was interrupted) is bench's own
            written = {p for p, st in _folder_files(out).items() if before.get(p) != st}
            written.discard(BENCH_MANIFEST)
            if written:
                owned.update(dict.fromkeys(written, name))
                _write_bench_manifest(out, owned)
        print(
            f"== {name}: {'ok' if rc == 0 else f'failed (exit {rc})'} in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        if rc != 0:
            failed.append(name)
    if owned:
        print(f"results in {out}", flush=True)
    if failed:
        raise CLIError(f"benchmark(s) failed: {', '.join(failed)}")
    if skipped and len(skipped) == len(names):
        raise CLIError(f"no benchmark run: {', '.join(skipped)} have no --quick mode")
    return 0


# --- demo -----------------------------------------------------------------------------------------


def cmd_demo(args):
    from ._demo import run_demo

    if not args.no_plot:
        replacing = _claim_output(
            args.output, force=args.force, kind="fastkpca demo plot", ours=_is_demo_plot
        )
        if replacing:
            print(replacing, file=sys.stderr)
    methods = args.methods.split(",") if args.methods else None
    rows = run_demo(
        output=None if args.no_plot else args.output,
        n_samples=args.n_samples,
        n_components=args.components,
        methods=methods,
        random_state=args.seed,
        device=args.device,
    )
    failed = [r["method"] for r in rows if r.get("error")]
    if failed:
        raise CLIError(f"demo: method(s) failed: {', '.join(failed)}")
    return 0


# --- parser ---------------------------------------------------------------------------------------


def _add_data_options(p):
    from ._utils import DEFAULT_BLOCK_ROWS
    from .source.files import _FORMAT_ALIASES, DEFAULT_MAX_LINE_LENGTH, FORMATS

    g = p.add_argument_group("data file")
    g.add_argument(
        "--label-column",
        metavar="COL",
        help="column holding labels, left out of the features (number or name; -1 = last; "
        "default: none, every column is a feature)",
    )
    g.add_argument(
        "--columns",
        metavar="COLS",
        help="comma-separated feature columns to use (numbers or names; default: all)",
    )
    g.add_argument(
        "--format",
        choices=[*FORMATS, *_FORMAT_ALIASES],
        help="file format (default: from the name and content)",
    )
    g.add_argument(
        "--header",
        choices=["auto", "yes", "no"],
        default="auto",
        help="whether a text file starts with a header line (default: auto, a "
        "header when no field of the first line is a number)",
    )
    g.add_argument(
        "--block-rows",
        type=_positive_int,
        default=None,
        metavar="N",
        help=f"rows per block when streaming (default: {DEFAULT_BLOCK_ROWS})",
    )
    g.add_argument(
        "--dtype",
        choices=["auto", "float64", "float32"],
        default="auto",
        help="working precision (default auto: float32 for float32 .npy / Parquet files, "
        "else float64; float32 output for float32 input)",
    )
    g.add_argument(
        "--libsvm-features",
        type=_positive_int,
        default=None,
        metavar="N",
        help="number of features of a LIBSVM file (default: its largest index, refused when "
        "far beyond the file's size)",
    )
    g.add_argument(
        "--libsvm-index-base",
        choices=["auto", "0", "1"],
        default="auto",
        help="the number of a LIBSVM file's first feature (default auto: 0 when an index 0 "
        "occurs in the file, else 1 as LIBSVM writes them; transform and evaluate use the "
        "numbering the model's training file had)",
    )
    g.add_argument(
        "--max-line-length",
        type=_positive_int,
        default=None,
        metavar="N",
        help="longest line of a text or LIBSVM file, in characters (default "
        f"{DEFAULT_MAX_LINE_LENGTH}); a longer line is refused",
    )


def _jobs(text: str) -> int:
    """``--jobs N``: scikit-learn's n_jobs (-1 all cores, -2 all but one, ...; not 0)."""
    from .execution import check_n_jobs

    try:
        jobs = check_n_jobs(int(text), name="--jobs")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--jobs takes a positive count of threads or -1 (all cores), -2 (all but one), "
            f"...; got {text!r}"
        ) from None
    assert jobs is not None
    return jobs


def _add_jobs_option(p):
    p.add_argument(
        "--jobs",
        "-j",
        type=_jobs,
        default=None,
        metavar="N",
        help="threads (default: every core this process may use; -1 the same, -2 all but one); "
        "the results do not depend on it",
    )


def _jobs_context(args):
    """The command's threads (``--jobs``) as the execution layer's context: estimators with
    ``n_jobs=None`` (fitted here, or loaded) run with that many."""
    from .execution import using_n_jobs

    jobs = getattr(args, "jobs", None)
    return contextlib.nullcontext() if jobs is None else using_n_jobs(jobs)


def _use_jobs(args, model) -> None:
    """A loaded model's own ``n_jobs`` and ``device`` give way to ``--jobs`` and ``--device``."""
    params = model.get_params(deep=False)
    jobs = getattr(args, "jobs", None)
    if jobs is not None and "n_jobs" in params:
        model.set_params(n_jobs=jobs)
    device = getattr(args, "device", None)
    if device is not None and "device" in params:
        model.set_params(device=device)


def _device(text: str) -> str:
    """``--device NAME``: a PyTorch device (``cuda``, ``cuda:1``, ``cpu``) or ``numpy``."""
    from .execution.arrays import check_device

    try:
        check_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_device_option(p):
    p.add_argument(
        "--device",
        type=_device,
        default=None,
        metavar="NAME",
        help="compute on this PyTorch device, the rows sent there block by block (e.g. cuda, "
        "cuda:1; needs PyTorch); default: numpy on this machine's cores.  Files read and "
        "written are the same either way",
    )


def _add_force_option(p, what):
    p.add_argument(
        "--force",
        action="store_true",
        help=f"replace an existing output file even if it is not {what}",
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback on errors",
    )
    common.add_argument(
        "--quiet", "-q", action="store_true", default=argparse.SUPPRESS, help="no progress bars"
    )

    from .decomposition import available_methods
    from .decomposition.exact import ExactKPCA
    from .kernels import KERNELS

    parser = argparse.ArgumentParser(
        prog="fastkpca",
        parents=[common],
        formatter_class=_HelpFormatter,
        description="Kernel PCA at scale: fit, apply and evaluate approximate KPCA models.",
    )
    parser.set_defaults(debug=False, quiet=False)
    from . import __version__

    parser.add_argument("--version", action="version", version=f"fastkpca {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "fit",
        formatter_class=_HelpFormatter,
        parents=[common],
        help="fit a model on a data file",
        description=f"Fit a kernel PCA model on DATA and save it (to {DEFAULT_MODEL} unless -o "
        "names another file).",
    )
    p.add_argument("data", metavar="DATA", help=_DATA_HELP)
    p.add_argument(
        "--method",
        "-m",
        default="exact",
        choices=list(METHODS),
        help="approximation method (default: exact)",
    )
    p.add_argument(
        "--components",
        "-k",
        type=int,
        default=None,
        metavar="K",
        help="number of components (default: min(10, what the method allows))",
    )
    kernel_defaults = ExactKPCA().get_params()  # every estimator takes the same kernel spec
    p.add_argument(
        "--kernel",
        choices=list(KERNELS),
        default=None,
        help=f"kernel (default: {kernel_defaults['kernel']})",
    )
    p.add_argument(
        "--gamma",
        type=_parse_gamma,
        default=None,
        help="kernel coefficient: a number, 'scale' (1 / (n_features * X.var())) or 'median' "
        "(1 / the median squared distance) (default: 1 / n_features)",
    )
    p.add_argument(
        "--degree",
        type=int,
        default=None,
        help=f"polynomial degree (default: {kernel_defaults['degree']})",
    )
    p.add_argument(
        "--coef0",
        type=float,
        default=None,
        help=f"polynomial coef0 (default: {kernel_defaults['coef0']})",
    )
    p.add_argument(
        "--nu",
        type=float,
        default=None,
        help=f"Matern smoothness (default: {kernel_defaults['nu']})",
    )
    p.add_argument("--seed", type=int, default=0, help="random_state (default: 0)")
    g = p.add_argument_group(
        "method options",
        "each applies to the methods named in its help; choices and defaults "
        "are the estimators' own",
    )
    methods = available_methods()
    parsers: dict = {"size": _parse_size, "bool": _parse_bool}
    for flag, name, conv, text in _METHOD_OPTIONS:
        text, choices = _method_option_help(name, text, methods)
        g.add_argument(
            flag, dest=name, type=parsers.get(conv, conv), choices=choices, default=None, help=text
        )
    g.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="any other estimator parameter, e.g. covariance=landmarks (repeatable; default: "
        "none, the estimator's defaults)",
    )
    g.add_argument(
        "--memory",
        default=None,
        metavar="BYTES",
        help="memory budget of --method auto, e.g. 2GB or 512M (default: 80%% of what is "
        "available)",
    )
    g.add_argument(
        "--time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="time budget of --method auto (default: none)",
    )
    p.add_argument(
        "--in-memory", action="store_true", help="read the whole file even for one-pass methods"
    )
    p.add_argument(
        "--output",
        "-o",
        default=None,
        metavar="MODEL",
        help=f"model file to write (default {DEFAULT_MODEL}); an existing file is replaced only "
        "if it is a fastkpca model, or with --force",
    )
    _add_force_option(p, "a fastkpca model")
    p.add_argument(
        "--estimate-error",
        action="store_true",
        help="after the fit, print the estimated relative rank-k error (fastkpca.metrics."
        "estimate_error) on a uniform subsample of DATA, without exact KPCA",
    )
    p.add_argument(
        "--estimate-rows",
        type=int,
        default=20000,
        metavar="N",
        help="rows of that subsample (default: 20000)",
    )
    p.add_argument(
        "--n-probe",
        type=int,
        default=2000,
        metavar="P",
        help="probe rows of the estimate (default: 2000)",
    )
    _add_data_options(p)
    _add_jobs_option(p)
    _add_device_option(p)
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser(
        "transform",
        formatter_class=_HelpFormatter,
        parents=[common],
        help="project a data file on a model",
        description="Project the rows of DATA on the principal axes of MODEL.",
    )
    p.add_argument("model", metavar="MODEL", help=_MODEL_HELP)
    p.add_argument("data", metavar="DATA", help=_DATA_HELP)
    p.add_argument(
        "--output",
        "-o",
        required=True,
        metavar="OUT",
        help="output file: .npy, .csv or .tsv (optionally .gz); an existing file is replaced "
        "only with --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    _add_data_options(p)
    _add_jobs_option(p)
    _add_device_option(p)
    p.set_defaults(func=cmd_transform)

    p = sub.add_parser(
        "evaluate",
        formatter_class=_HelpFormatter,
        parents=[common],
        help="errors of a model on a data file: estimated, and against exact KPCA",
        description="Evaluate MODEL on the rows of DATA (all of them, or a uniform random "
        "subsample of --max-samples rows), with the model's kernel and number of components: "
        "(1) the error estimate of fastkpca.metrics.estimate_error, exact on the Gram of the "
        "evaluated rows when they are at most --n-probe, else estimated from a probe of "
        "--n-probe of them with its uncertainty; (2) unless --no-exact, the errors against "
        "exact KPCA of the evaluated rows. Each figure says which computation produced it.",
    )
    p.add_argument("model", metavar="MODEL", help=_MODEL_HELP)
    p.add_argument("data", metavar="DATA", help=_DATA_HELP)
    p.add_argument(
        "--max-samples",
        type=int,
        default=2000,
        metavar="N",
        help="rows of DATA to evaluate on, a uniform random subsample when DATA has more "
        "(default: 2000; exact KPCA of them is O(N^2) memory and O(N^3) time)",
    )
    p.add_argument("--seed", type=int, default=0, help="subsample and probe seed (default: 0)")
    p.add_argument(
        "--n-probe",
        type=int,
        default=2000,
        metavar="P",
        help="probe rows of the error estimate: with at most P evaluated rows it is exact on "
        "them (default: 2000; see fastkpca.metrics.estimate_error)",
    )
    p.add_argument(
        "--no-exact",
        action="store_true",
        help="skip exact KPCA of the evaluated rows: only the error estimate (then "
        "--max-samples may be large)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_data_options(p)
    _add_jobs_option(p)
    _add_device_option(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "info",
        formatter_class=_HelpFormatter,
        parents=[common],
        help="describe a model file",
        description="Print what a model file holds (checksums verified).",
    )
    p.add_argument("model", metavar="MODEL", help=_MODEL_HELP)
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "bench",
        formatter_class=_HelpFormatter,
        parents=[common],
        help="run the benchmark scripts",
        description="Run the scripts of the repository's benchmarks/ folder (needs a source "
        "checkout); each writes JSON and PNG results into the --out folder. Arguments after "
        "-- are passed to each script.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="scripts to run (default: all)")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"small sizes ({BENCH_QUICK_TIME} for all of them; results named *_quick); "
        "scripts without a --quick mode are skipped. Without it: the full-size runs, which "
        "take hours and much memory",
    )
    p.add_argument("--list", action="store_true", help="list the scripts and exit")
    p.add_argument(
        "--out",
        default=DEFAULT_BENCH_OUT,
        metavar="DIR",
        help="folder the results are written to (created if missing; relative to the current "
        "directory). A folder holding files that fastkpca bench did not write is refused, "
        "unless --force",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write into an --out folder that holds other files (the scripts may replace them)",
    )
    p.add_argument(
        "--dir",
        default=None,
        help="the benchmarks folder (default: ./benchmarks, then the checkout's)",
    )
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "demo",
        formatter_class=_HelpFormatter,
        parents=[common],
        help="fit every method on the embedded pendigits sample",
        description="Fit every available method on the pendigits sample shipped "
        "with fastkpca, print a comparison table and plot the first "
        "two components of each.",
    )
    p.add_argument(
        "--output",
        "-o",
        default="fastkpca-demo.png",
        metavar="PNG",
        help="plot file (default fastkpca-demo.png); an existing file is replaced only if it is "
        "a plot of fastkpca demo, or with --force",
    )
    _add_force_option(p, "a plot of fastkpca demo")
    p.add_argument("--no-plot", action="store_true", help="skip the plot")
    p.add_argument(
        "--n-samples",
        type=int,
        default=None,
        metavar="N",
        help="use a random subsample of N rows (default: all 3498)",
    )
    p.add_argument(
        "--components", "-k", type=int, default=5, metavar="K", help="components per method"
    )
    p.add_argument(
        "--methods",
        default=None,
        help=f"comma-separated methods among {', '.join(methods)} (default: every one)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the subsample and of every method")
    _add_jobs_option(p)
    _add_device_option(p)
    p.set_defaults(func=cmd_demo)
    return parser


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, MemoryError):
        return "out of memory" + (f" ({text})" if text else "")
    if isinstance(exc, KeyError):
        return f"missing key {text}"
    return text or type(exc).__name__


@contextlib.contextmanager
def _warnings_as_lines():
    """Within the block, each warning (``fastkpca.kernels.DegenerateKernelWarning``, ...) is
    printed as one line ``fastkpca: warning: ...`` on stderr, without Python's file and line."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split()) or category.__name__
        print(f"fastkpca: warning: {text}", file=sys.stderr)

    saved = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved


def main(argv=None) -> int:
    """Entry point of the ``fastkpca`` command; returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args = []
    if "--" in argv:  # `fastkpca bench NAME -- ARGS`: ARGS go to the benchmark scripts
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    if script_args and args.command != "bench":
        parser.error("arguments after -- are passed to benchmark scripts: only for bench")
    args.script_args = script_args
    if getattr(args, "block_rows", 0) is None:
        from ._utils import DEFAULT_BLOCK_ROWS

        args.block_rows = DEFAULT_BLOCK_ROWS
    try:
        with (
            _signals_end_like_errors(),
            contextlib.nullcontext() if args.debug else _warnings_as_lines(),
            _jobs_context(args),
        ):
            return int(args.func(args) or 0)
    except _Terminated as exc:
        print(f"fastkpca: terminated by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("fastkpca: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (e.g. `fastkpca info m.npz | head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        if args.debug:
            raise
        print(f"fastkpca: error: {_one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
