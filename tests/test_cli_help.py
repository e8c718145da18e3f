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
)
from fastkpca.features import FEATURES
from fastkpca.kernels import KERNELS
from fastkpca.source.files import FORMATS


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
    choices = _parser._parameter_choices()
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
    args = parser.parse_args(["fit", "x.npy", "--n-features", "auto", "--n-landmarks", "auto"])
    assert args.n_features == "auto" and args.n_landmarks == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["fit", "x.npy", "--n-features", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["fit", "x.npy", "--quantize", "maybe"])
    capsys.readouterr()
