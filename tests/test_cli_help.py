"""The command line's help tells the truth: every choice list is the estimators' own, every
option says its default, and what the help lists as accepted is accepted."""

from __future__ import annotations

import argparse

import pytest

from fastkpca import cli
from fastkpca._landmarks import LANDMARK_METHODS
from fastkpca._model_schema import check_params
from fastkpca.cli import _common, _parser
from fastkpca.decomposition import (
    METHODS,
    available_methods,
    estimator_class,
    exact,
    nystrom,
    random_features,
    reduced_set,
    sparsified,
    streaming,
)
from fastkpca.features import DEFAULT_N_RANDOM_FEATURES, FEATURES
from fastkpca.kernels import KERNELS
from fastkpca.source.files import _FORMAT_ALIASES, DEFAULT_MAX_LINE_LENGTH, FORMATS

# --- the parser's tables, derived from the estimators -----------------------------------------
# The parser is built without importing the estimators (fast --help); what it says about them is
# written out in fastkpca.cli._parser, and derived here from the estimators themselves.


def _parameter_choices() -> dict:
    """(estimator class name, parameter) -> the values the estimator accepts, from its module's
    own constants (what the method options' help and choices are built from)."""

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

    solver_default = "the solver's own (by dtype)"
    no_growth = "none (the size given)"
    return {
        ("RandomFeatureKPCA", "n_random_features"): str(DEFAULT_N_RANDOM_FEATURES),
        ("StreamingKPCA", "n_random_features"): str(DEFAULT_N_RANDOM_FEATURES),
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


def _derived_method_option_help() -> dict:
    methods = available_methods()
    return {
        name: _method_option_help(name, text, methods)
        for _, name, _, text in _parser._METHOD_OPTIONS
    }


def test_the_parsers_tables_are_the_estimators():
    import pprint

    derived = _derived_method_option_help()
    assert _parser.METHOD_OPTION_HELP == derived, (
        "an estimator changed: replace METHOD_OPTION_HELP in fastkpca/cli/_parser.py with\n"
        + pprint.pformat(derived, width=96, sort_dicts=False)
    )
    assert _parser.KERNEL_NAMES == tuple(KERNELS)
    defaults = estimator_class("exact")().get_params()
    assert _parser.KERNEL_DEFAULTS == {k: defaults[k] for k in _parser.KERNEL_DEFAULTS}
    for method in available_methods().values():  # every estimator takes the same kernel spec
        params = method().get_params()
        assert {k: params[k] for k in _parser.KERNEL_DEFAULTS} == _parser.KERNEL_DEFAULTS
    assert _parser.DATA_FORMATS == (*FORMATS, *_FORMAT_ALIASES)
    assert _parser.DEFAULT_MAX_LINE_LENGTH == DEFAULT_MAX_LINE_LENGTH
    assert _parser.DEMO_METHODS == tuple(available_methods())


def test_help_and_argument_errors_import_no_estimator():
    """``fastkpca --help``, a usage error and a missing input file are answered without
    importing scikit-learn, SciPy or an estimator module (each took seconds)."""
    import subprocess
    import sys

    code = (
        "import sys, fastkpca.cli as c\n"
        "for argv in (['--help'], ['fit', '--help'], ['fit'], ['fit', 'missing.npy'],"
        " ['transform', 'missing.npz', 'x.csv', '-o', 'o.npy']):\n"
        "    try:\n"
        "        c.main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy', 'pandas')"
        " or m.startswith('fastkpca.decomposition.') or m in ('fastkpca.kernels',"
        " 'fastkpca.cli.fit', 'fastkpca.cli.transform'))\n"
        "print('HEAVY', heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout, r.stdout[-500:]
    assert "data file not found: missing.npy" in r.stderr
    assert "model file not found: missing.npz" in r.stderr


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser):
    """(subcommand, action) for every option of every subcommand (and the main parser)."""
    out = [("", a) for a in parser._actions]
    for name, sub in _subparsers(parser).items():
        out += [(name, a) for a in sub._actions]
    return out


def _help_text(parser, action):
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


@pytest.fixture(scope="module")
def parser():
    return cli.build_parser()


def _find(parser, command, flag):
    sub = _subparsers(parser)[command]
    return next(a for a in sub._actions if flag in a.option_strings)


def test_choices_are_the_estimators_constants(parser):
    expected = {
        ("fit", "--method"): set(METHODS),
        ("fit", "--kernel"): set(KERNELS),
        ("fit", "--eigen-solver"): set(exact.EXACT_SOLVERS)
        | set(reduced_set.SOLVERS)
        | set(sparsified.EIGEN_SOLVERS),
        ("fit", "--features"): {"auto", *FEATURES},
        ("fit", "--solver"): set(random_features.SOLVERS) | set(nystrom.SOLVERS),
        ("fit", "--density"): set(reduced_set.DENSITIES),
    }
    for (command, flag), values in expected.items():
        assert set(_find(parser, command, flag).choices) == values, flag
    for command in ("fit", "transform", "evaluate"):
        assert set(FORMATS) <= set(_find(parser, command, "--format").choices)
    landmarks = _find(parser, "fit", "--landmarks")
    assert landmarks.choices is None  # a method name or a file of landmark rows
    for method in LANDMARK_METHODS:
        assert method in landmarks.help


def test_every_choice_is_one_the_parser_has(parser):
    # and no option of fit keeps a retyped list: each one with choices is listed above, or
    # is the command line's own (header, dtype, index base)
    own = {"--header", "--dtype", "--libsvm-index-base", "--format"}
    listed = {"--method", "--kernel", "--eigen-solver", "--features", "--solver", "--density"}
    for command, action in _options(parser):
        if action.choices is not None and action.option_strings:
            assert set(action.option_strings) & (own | listed), (command, action.option_strings)


@pytest.mark.parametrize("flag,param", [(f, p) for f, p, _, _ in _parser._METHOD_OPTIONS])
def test_method_options_name_their_methods_and_accept_what_they_list(parser, flag, param):
    action = _find(parser, "fit", flag)
    users = {m: cls for m, cls in available_methods().items() if param in cls._get_param_names()}
    assert users, flag
    assert f"[{', '.join(users)}]" in action.help, flag  # the methods that take it
    choices = _parameter_choices()
    for method, cls in users.items():
        for value in choices.get((cls.__name__, param), ()):
            # what the help lists, the estimator accepts (tensorsketch: for the polynomial kernel)
            extra = {"kernel": "polynomial"} if value == "tensorsketch" else {}
            check_params(cls, {param: value, **extra})
        default = cls().get_params()[param]
        if default is not None and not isinstance(default, bool):
            assert f"{default}" in action.help, (flag, method, default)


def test_every_option_says_its_default(parser):
    for command, action in _options(parser):
        if not action.option_strings or action.required or action.nargs == 0:
            continue  # positionals, required options, flags
        text = _help_text(_subparsers(parser).get(command, parser), action)
        assert "default" in text.lower(), (command, action.option_strings, text)


def test_kernel_defaults_are_the_estimators(parser):
    defaults = estimator_class("exact")().get_params()
    for flag in ("--kernel", "--degree", "--coef0", "--nu"):
        name = flag.lstrip("-")
        assert f"default: {defaults[name]})" in _find(parser, "fit", flag).help, flag


def test_demo_options_are_documented(parser):
    for flag in ("--components", "--seed", "--methods"):
        action = _find(parser, "demo", flag)
        assert action.help and "default" in _help_text(_subparsers(parser)["demo"], action)


@pytest.mark.parametrize("command", ["", "fit", "transform", "evaluate", "info", "bench", "demo"])
def test_help_runs(command, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"] if command else ["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: fastkpca")


def test_fit_help_names_the_default_model_file(parser):
    sub = _subparsers(parser)["fit"]
    assert _common.DEFAULT_MODEL in sub.description
    assert _common.DEFAULT_MODEL in _find(parser, "fit", "--output").help


def test_bench_quick_time_is_measured(parser):
    # the help states the time measured for `fastkpca bench --quick` (no placeholder)
    text = _find(parser, "bench", "--quick").help
    assert _common.BENCH_QUICK_TIME in text and "N minutes" not in text


def test_size_options_take_auto(parser, capsys):
    argv = ["fit", "x.npy", "--n-random-features", "auto", "--n-landmarks", "auto"]
    args = parser.parse_args(argv)
    assert args.n_random_features == "auto" and args.n_landmarks == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["fit", "x.npy", "--n-random-features", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["fit", "x.npy", "--quantize", "maybe"])
    capsys.readouterr()


def test_old_option_spellings_still_work_and_are_not_shown(parser, capsys):
    """Renamed options (--n-features, --memory, --time) keep their old spelling for scripts;
    the help shows the new one only."""
    import re

    argv = ["fit", "x.npy", "--n-features", "64", "--memory", "1G", "--time", "30"]
    args = parser.parse_args(argv)
    assert (args.n_random_features, args.memory_budget, args.time_budget) == (64, "1G", 30.0)
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    out = capsys.readouterr().out
    for old, new in _parser.OLD_FLAGS.items():
        assert new in out
        assert re.search(rf"(?<![\w-]){old}(?![\w-])", out) is None, old
