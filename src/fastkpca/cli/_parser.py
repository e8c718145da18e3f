"""The parser of the ``fastkpca`` command: its commands, options, help and defaults.

Building it imports neither scikit-learn nor SciPy nor any estimator (``fastkpca --help`` and
argument errors answer at once): what the help says about the estimators (which methods take an
option, its choices, its defaults; the kernels; the file formats) is written out in the tables
below, and ``tests/test_cli_help.py`` derives the same tables from the estimators and their
modules' constants, so they cannot drift from what the code accepts.
"""

from __future__ import annotations

import argparse
import copy
import functools

from .. import __version__
from .._utils import DEFAULT_BLOCK_ROWS
from ..decomposition import METHODS
from ..execution import check_n_jobs
from ..execution.arrays import check_device
from ._common import (
    BENCH_QUICK_TIME,
    DEFAULT_BENCH_OUT,
    DEFAULT_MODEL,
    _parse_bool,
    _parse_gamma,
    _parse_size,
    _positive_int,
)

#: The method options of ``fit``: (flag, estimator parameter, value parser, what it is).
_METHOD_OPTIONS = [
    ("--eigen-solver", "eigen_solver", str, "eigensolver"),
    (
        "--n-random-features",
        "n_random_features",
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

#: Each method option's help and choices (None: any value), as the estimators define them: the
#: methods that take it, the values each accepts and each one's default (derived and checked in
#: ``tests/test_cli_help.py``, which prints this table anew when an estimator changes).
METHOD_OPTION_HELP: dict[str, tuple[str, tuple | None]] = {
    "eigen_solver": (
        "eigensolver [exact, reduced-set, sparsified]; choices: auto (exact, "
        "reduced-set), dense (exact, reduced-set), lanczos, randomized (exact, "
        "reduced-set), orthogonal, matrix_free (exact); default: auto (exact, "
        "reduced-set); lanczos (sparsified)",
        ("auto", "dense", "lanczos", "randomized", "orthogonal", "matrix_free"),
    ),
    "n_random_features": (
        "number of random features m, or 'auto' (grown until --tol is met) "
        "[random-features, streaming]; default: 1000",
        None,
    ),
    "features": (
        "random feature map ('auto': by kernel) [random-features, streaming]; choices: "
        "auto, rff, orf, qmc, fastfood, tensorsketch; default: auto",
        ("auto", "rff", "orf", "qmc", "fastfood", "tensorsketch"),
    ),
    "solver": (
        "how the principal axes are computed [nystrom, random-features]; choices: auto, "
        "exact, randomized, countsketch (random-features); default: auto",
        ("auto", "exact", "randomized", "countsketch"),
    ),
    "sketch_size": (
        "sketch size: Frequent Directions rows ell (streaming), columns q of the "
        "randomized solver's test matrix (nystrom) [nystrom, streaming]; default: 4 k "
        "+ 20 (nystrom); max(50, 2 k) (streaming)",
        None,
    ),
    "n_landmarks": (
        "number of landmarks c, or 'auto' (grown until --tol is met) [nystrom]; "
        "default: min(1000, rows)",
        None,
    ),
    "landmarks": (
        "landmark choice, or a data file of landmark rows [nystrom]; choices: uniform, "
        "kmeans, rls, rpcholesky; default: uniform",
        None,
    ),
    "density": (
        "reduced-set density estimate [reduced-set]; choices: shadow, kmeans, paring, "
        "herding, uniform; default: shadow",
        ("shadow", "kmeans", "paring", "herding", "uniform"),
    ),
    "n_centers": (
        "number of centers (densities other than shadow) [reduced-set]; default: min(500, rows)",
        None,
    ),
    "ell": ("shadow density parameter ell (eps = sigma / ell) [reduced-set]; default: 4.0", None),
    "sample_prob": ("probability of keeping each Gram entry [sparsified]; default: 0.1", None),
    "quantize": (
        "1-bit quantization of the kept entries: true or false [sparsified]; default: false",
        None,
    ),
    "tol": (
        "grow the model until its relative rank-k error is at most 1 + TOL (the estimate plus "
        "2 standard errors) [nystrom, random-features, streaming]; default: none (the size "
        "given)",
        None,
    ),
    "eigen_tol": (
        "iterative eigensolver tolerance [exact, sparsified]; default: the solver's own (by dtype)",
        None,
    ),
    "max_iter": (
        "iterative eigensolver iteration limit [exact, sparsified]; default: the solver's own",
        None,
    ),
}

#: The kernels (``fastkpca.kernels.KERNELS``) and the estimators' kernel defaults.
KERNEL_NAMES = ("rbf", "laplacian", "matern", "polynomial", "linear", "cosine", "sigmoid")
KERNEL_DEFAULTS = {"kernel": "rbf", "degree": 3, "coef0": 1.0, "nu": 1.5}

#: ``--format`` names (``fastkpca.source.files.FORMATS`` and their aliases) and the longest line
#: a text file may have by default.
DATA_FORMATS = ("npy", "text", "parquet", "libsvm", "csv", "tsv", "svmlight", "pq")
DEFAULT_MAX_LINE_LENGTH = 8388608

#: Option spellings of earlier releases (old -> new): each still works, as a second option
#: string of the new option that the help does not show, so that scripts keep running.
OLD_FLAGS = {
    "--n-features": "--n-random-features",
    "--memory": "--memory-budget",
    "--time": "--time-budget",
}

#: The methods the demo runs (``fastkpca.decomposition.available_methods()``).
DEMO_METHODS = ("exact", "nystrom", "random-features", "streaming", "reduced-set", "sparsified")


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

    def _format_action_invocation(self, action):
        # the old spellings of renamed options (OLD_FLAGS) are accepted but not shown
        if not OLD_FLAGS.keys() & set(action.option_strings):
            return super()._format_action_invocation(action)
        shown = copy.copy(action)
        shown.option_strings = [s for s in action.option_strings if s not in OLD_FLAGS]
        return super()._format_action_invocation(shown)


def _spellings(flag: str) -> list[str]:
    """An option's flag, then its old spellings (:data:`OLD_FLAGS`), which the help hides."""
    return [flag, *(old for old, new in OLD_FLAGS.items() if new == flag)]


_DATA_HELP = "data file: .npy, .csv / .tsv (optionally .gz), .parquet or LIBSVM text"
_MODEL_HELP = "model file written by fastkpca fit (or model.save)"


def _add_data_options(p):

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
        choices=list(DATA_FORMATS),
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


def _compute_on(text: str) -> str:
    """``--device NAME``: a PyTorch device (``cuda``, ``cuda:1``, ``cpu``) or ``numpy``."""

    try:
        check_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_compute_on_option(p):
    p.add_argument(
        "--device",
        type=_compute_on,
        default=None,
        metavar="NAME",
        help="compute on this PyTorch device, the rows sent there block by block (e.g. cuda, "
        "cuda:1; needs PyTorch); default: numpy on this machine's cores.  Files read and "
        "written are the same either way",
    )


def _add_run_options(p):
    """The options of every command that reads DATA: the file, the threads, the device."""
    _add_data_options(p)
    _add_jobs_option(p)
    _add_compute_on_option(p)


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

    parser = argparse.ArgumentParser(
        prog="fastkpca",
        parents=[common],
        formatter_class=_HelpFormatter,
        description="Kernel PCA at scale: fit, apply and evaluate approximate KPCA models.",
    )
    parser.set_defaults(debug=False, quiet=False)

    parser.add_argument("--version", action="version", version=f"fastkpca {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    command = functools.partial(sub.add_parser, formatter_class=_HelpFormatter, parents=[common])

    p = command(
        "fit",
        help="fit a model on a data file",
        description=f"Fit a kernel PCA model on DATA and save it (to {DEFAULT_MODEL} unless -o "
        "names another file).",
    )
    p.add_argument("data", metavar="DATA", help=_DATA_HELP)
    p.add_argument(
        "--method",
        "-m",
        default="auto",
        choices=list(METHODS),
        help="approximation method (default: auto, AutoKPCA: the method and its size chosen "
        "from the data, --tol and the --memory-budget / --time-budget)",
    )
    p.add_argument(
        "--components",
        "-k",
        type=int,
        default=None,
        metavar="K",
        help="number of components (default: min(10, what the method allows))",
    )
    kernel_defaults = KERNEL_DEFAULTS  # every estimator takes the same kernel spec
    p.add_argument(
        "--kernel",
        choices=list(KERNEL_NAMES),
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
    parsers: dict = {"size": _parse_size, "bool": _parse_bool}
    for flag, name, conv, text in _METHOD_OPTIONS:
        text, choices = METHOD_OPTION_HELP[name]
        g.add_argument(
            *_spellings(flag),
            dest=name,
            type=parsers.get(conv, conv),
            choices=choices,
            default=None,
            help=text,
        )
    g.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="any other estimator parameter, e.g. covariance=landmarks (repeatable; default: "
        "none, the estimator's defaults)",
    )
    g.add_argument(
        *_spellings("--memory-budget"),
        dest="memory_budget",
        default=None,
        metavar="BYTES",
        help="memory budget of --method auto, e.g. 2GB or 512M (default: 80%% of what is "
        "available)",
    )
    g.add_argument(
        *_spellings("--time-budget"),
        dest="time_budget",
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
    _add_run_options(p)

    p = command(
        "transform",
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
        help="output file: .npy, .csv or .tsv (optionally .gz), or .parquet, its columns named "
        "as the model's outputs; an existing file is replaced only with --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    _add_run_options(p)

    p = command(
        "evaluate",
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
    _add_run_options(p)

    p = command(
        "info",
        help="describe a model file",
        description="Print what a model file holds (checksums verified).",
    )
    p.add_argument("model", metavar="MODEL", help=_MODEL_HELP)
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")

    p = command(
        "bench",
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

    p = command(
        "demo",
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
        help=f"comma-separated methods among {', '.join(DEMO_METHODS)} (default: every one)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the subsample and of every method")
    _add_jobs_option(p)
    _add_compute_on_option(p)
    return parser
