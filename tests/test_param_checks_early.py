"""Bad parameters are refused before any data is read, by ``fit`` and by a model file's load.

Every estimator checks its parameters at the top of ``fit`` (its ``_check_params``), before its
first look at the rows: so a bad value costs nothing, and ``fastkpca.load`` -- which runs ``fit``
up to that first look (``fastkpca._model_schema.check_params``) -- refuses a model file whose
parameters were edited to that value.  For every saveable class and a list of bad values per
parameter: ``fit`` on an input whose first use raises a sentinel raises ValueError naming the
parameter instead, and a saved model whose file was edited to hold the value (checksums
recomputed) is refused at load, naming the parameter.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib
import json
import warnings

import numpy as np
import pytest

import fastkpca
from fastkpca import persistence
from fastkpca.decomposition import SAVEABLE


class _Untouchable(Exception):
    """Raised by any look at :class:`_Rows`: the estimator read the data."""


class _Rows:
    """Stands for training rows; any use (attribute, conversion, iteration, length, indexing)
    raises :class:`_Untouchable`."""

    def __getattribute__(self, name):
        raise _Untouchable

    def __array__(self, *args, **kwargs):
        raise _Untouchable

    def __iter__(self):
        raise _Untouchable

    def __len__(self):
        raise _Untouchable

    def __getitem__(self, key):
        raise _Untouchable


_NAN = float("nan")

#: parameter -> values that no data makes valid.
BAD = {
    "n_components": [0, -1, 1.5, "x", True, _NAN],
    "kernel": ["x", 3, None],
    "gamma": [-1.0, 0, "x", _NAN, True],
    "degree": [0, 1.5, "x"],
    "coef0": [-1.0, "x", float("inf")],
    "nu": [0, -1.0, "x", -float("inf")],
    "random_state": [-1, 1.5, "x"],
    "fit_inverse_transform": ["yes", 1, None],
    "alpha": [-1.0, "x", _NAN],
    "n_inverse_samples": [0, -3, 2.5, "x"],
    "eigen_solver": ["x", None],
    "tol": [-1.0, "x", _NAN],
    "eigen_tol": [-1.0, "x", _NAN],
    "max_iter": [0, 1.5, "x"],
    "n_landmarks": [0, -1, 1.5, "x"],
    "landmarks": ["x", 5, [1.0, 2.0]],
    "covariance": ["x"],
    "solver": ["x"],
    "sketch_size": [0, 1.5, "x"],
    "n_random_features": [0, -1, 1.5, "x"],
    "features": ["x"],
    "n_buckets": [0, "x"],
    "input_sketch": [0, "x", True],
    "oversamples": [-1, "x"],
    "n_passes": [3, True],
    "density": ["x"],
    "center": ["x"],
    "ell": [0, -1.0, "x"],
    "n_centers": [0, "x"],
    "sample_prob": [0, 1.5, "x"],
    "quantize": ["yes", 1],
    "rounding": [0, 1.5, "x"],
    "projection_dim": [0, 1.5, "x"],
    "n_jobs": [0, 1.5, "x"],
    "verbose": [-1, "x"],
    "device": ["no such device", 3],
    # AutoKPCA's budgets
    "memory_budget": [0, -1, "lots", True, _NAN],
    "time_budget": [0, -1.0, "x", True, _NAN],
    # fastkpca.KernelPCA, scikit-learn's signature
    "kernel_params": ["x"],
    "iterated_power": [-1, "x"],
    "remove_zero_eig": ["x"],
    "copy_X": ["x"],
}

#: Parameters whose bad values need another parameter set to be used at all.
CONTEXT = {
    "degree": {"kernel": "polynomial"},
    "coef0": {"kernel": "polynomial"},
    "nu": {"kernel": "matern"},
}

#: The classes whose map cannot serve the polynomial / matern kernel, and what they skip.
SKIP = {
    "RandomFourierFeatures": {"degree", "coef0"},
    "OrthogonalRandomFeatures": {"degree", "coef0"},
    "FastfoodFeatures": {"degree", "coef0"},
    "TensorSketchFeatures": {"nu"},
    "ReducedSetKPCA": {"degree", "coef0"},  # the default shadow density needs a radial kernel
}

#: Where a class accepts more than :data:`BAD` allows: fastkpca.KernelPCA takes scikit-learn's
#: kernel parameters (real degree >= 0, any coef0, gamma >= 0).
BAD_FOR = {
    "KernelPCA": {"degree": [-1, "x"], "coef0": ["x", float("inf")], "gamma": [-1.0, "x", _NAN]}
}


def _bad(name, param):
    return BAD_FOR.get(name, {}).get(param, BAD.get(param))


def _class(name):
    return getattr(importlib.import_module(SAVEABLE[name]), name)


def _cases():
    cases = []
    for name in sorted(SAVEABLE):
        cls = _class(name)
        for param in sorted(cls._get_param_names()):
            if param in SKIP.get(name, ()):
                continue
            for value in _bad(name, param) or []:
                cases.append(pytest.param(name, param, value, id=f"{name}-{param}-{value!r}"))
    return cases


def test_every_parameter_has_bad_values():
    for name in SAVEABLE:
        for param in _class(name)._get_param_names():
            skipped = param in SKIP.get(name, ())
            assert skipped or _bad(name, param), f"{name}: no bad values listed for {param!r}"


def _params(name, param, value):
    cls = _class(name)
    context = {k: v for k, v in CONTEXT.get(param, {}).items() if k in cls._get_param_names()}
    return cls, {**context, param: value}


@functools.cache
def _source_model():
    X = np.random.default_rng(0).standard_normal((30, 3))
    return fastkpca.ExactKPCA(2, gamma=0.5).fit(X)


@pytest.mark.parametrize("name,param,value", _cases())
def test_fit_refuses_before_reading_rows(name, param, value):
    cls, params = _params(name, param, value)
    model = cls(**params)
    with pytest.raises(ValueError, match=param):
        if name != "CompressedKPCA":
            model.fit(_Rows())
        elif param in ("rounding", "projection_dim", "random_state"):
            # built from a fitted model, not from rows
            fastkpca.compress_expansion(_source_model(), **{param: value})
        else:
            model._check_params()


# --- model files ----------------------------------------------------------------------------


def _fitted(name, cls, context):
    """A small fitted model of ``name``, with the good parameters ``context``."""
    X = np.random.default_rng(0).standard_normal((30, 3))
    if name == "CompressedKPCA":
        return fastkpca.compress_expansion(_source_model())
    kwargs = {"n_components": 2} if "n_components" in cls._get_param_names() else {}
    if "n_random_features" in cls._get_param_names():
        kwargs["n_random_features"] = 8
    if "n_landmarks" in cls._get_param_names():
        kwargs["n_landmarks"] = 10
    if "n_centers" in cls._get_param_names():
        kwargs.update(density="kmeans", n_centers=10)
    if name == "KernelPCA":
        kwargs["kernel"] = "rbf"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**{**kwargs, **context}).fit(X)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(class name, context parameters) -> path of a saved model."""
    folder = tmp_path_factory.mktemp("param_models")
    out = {}

    def get(name, cls, context):
        key = (name, tuple(sorted(context.items())))
        if key not in out:
            path = folder / f"{name}-{len(out)}.npz"
            _fitted(name, cls, context).save(path)
            out[key] = path
        return out[key]

    return get


def _read(path):
    with np.load(path, allow_pickle=False) as f:
        contents = {k: f[k] for k in f.files}
    meta = json.loads(str(contents.pop("__fastkpca__")[()]))
    contents.pop("__checksum__")
    return meta, contents


def _write(path, meta, arrays):
    """A model file with every checksum recomputed (what a forger can do)."""
    meta = copy.deepcopy(meta)
    meta["arrays"] = {
        key: {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": persistence._array_digest(a)}
        for key, a in arrays.items()
    }
    text = json.dumps(meta, sort_keys=True)
    contents = dict(arrays)
    contents["__fastkpca__"] = np.array(text)
    contents["__checksum__"] = np.array(hashlib.sha256(text.encode()).hexdigest())
    with open(path, "wb") as f:
        np.savez(f, **contents)


@pytest.mark.parametrize("name,param,value", _cases())
def test_load_refuses_an_edited_parameter(name, param, value, saved, tmp_path):
    cls, params = _params(name, param, value)
    meta, arrays = _read(saved(name, cls, {k: v for k, v in params.items() if k != param}))
    enc = persistence._Encoder()
    meta["params"][param] = enc.encode(value, param)
    arrays.update(enc.arrays)
    path = tmp_path / "edited.npz"
    _write(path, meta, arrays)
    with pytest.raises(ValueError, match=param) as info:
        fastkpca.load(path)
    assert str(path) in str(info.value)


def test_unedited_files_load(saved):
    # the files the edits start from are valid: the refusals above are the edits'
    for name in SAVEABLE:
        cls = _class(name)
        fastkpca.load(saved(name, cls, {}))
