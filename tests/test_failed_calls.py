"""A failed call leaves the model as it was: every estimator, every mutating call, many failures.

Each case takes the estimator's attribute mapping (and a deep copy of it) before a call that
raises, then checks that afterwards the model holds exactly the same attributes, bound to the
very same objects (restored, not recomputed), and that none of those objects was modified in
place (equal to the deep copy: arrays by ``np.array_equal``, sketches and feature maps by their
state).  ``StreamingKPCA.partial_fit`` and ``merge`` get cases of their own, including the
sequence of the user report: a stream whose second block is bad must not leave its first block
in the sketch.
"""

import copy
import sys
import warnings

import numpy as np
import pytest
from sklearn.base import clone

import fastkpca.solvers
from fastkpca import (
    ExactKPCA,
    KernelPCA,
    NystromKPCA,
    RandomFeatureKPCA,
    ReducedSetKPCA,
    SparsifiedKPCA,
    StreamingKPCA,
    compress_expansion,
)
from fastkpca.decomposition import SAVEABLE
from fastkpca.decomposition._base import MUTATING_METHODS, BaseKPCA
from fastkpca.kernels import Kernel
from fastkpca.transformers import (
    FastfoodFeatures,
    OrthogonalRandomFeatures,
    RandomFourierFeatures,
    TensorSketchFeatures,
)

N, D = 300, 5
RNG = np.random.default_rng(0)
X = RNG.normal(size=(N, D))
X_NEW = RNG.normal(size=(N, D)) + 0.5  # other rows: a refit on them changes every array
BAD = X_NEW.copy()
BAD[250] = np.nan  # in the second block of BLOCKS_NAN, after 200 good rows

#: name -> (factory, whether fit runs an eigensolver, whether fit reads every row)
ESTIMATORS = {
    "ExactKPCA": (lambda: ExactKPCA(3, gamma=0.1, fit_inverse_transform=True), True),
    "KernelPCA": (lambda: KernelPCA(3, kernel="rbf", gamma=0.1), True),
    "NystromKPCA": (lambda: NystromKPCA(3, gamma=0.1, n_landmarks=20, random_state=0), True),
    "NystromKPCA-given": (
        lambda: NystromKPCA(3, gamma=0.1, landmarks=X[:20], random_state=0),
        True,
    ),
    "RandomFeatureKPCA": (
        lambda: RandomFeatureKPCA(3, gamma=0.1, n_random_features=40, random_state=0),
        True,
    ),
    "StreamingKPCA": (
        lambda: StreamingKPCA(3, gamma=0.1, n_random_features=40, sketch_size=6, random_state=0),
        True,
    ),
    "ReducedSetKPCA": (lambda: ReducedSetKPCA(3, gamma=0.1, random_state=0), True),
    "SparsifiedKPCA": (
        lambda: SparsifiedKPCA(3, gamma=0.1, sample_prob=0.5, random_state=0),
        True,
    ),
    "RandomFourierFeatures": (
        lambda: RandomFourierFeatures(20, gamma=0.1, random_state=0),
        False,
    ),
    "OrthogonalRandomFeatures": (
        lambda: OrthogonalRandomFeatures(20, gamma=0.1, random_state=0),
        False,
    ),
    "FastfoodFeatures": (lambda: FastfoodFeatures(20, gamma=0.1, random_state=0), False),
    "TensorSketchFeatures": (
        lambda: TensorSketchFeatures(20, kernel="polynomial", gamma=0.1, random_state=0),
        False,
    ),
}


class SolverFailure(Exception):
    """Raised from inside the eigensolver by the ``solver`` failure."""


def _fail_in_solver(monkeypatch):
    """Make the sign fixing every eigensolver ends with raise, in every module that holds it."""
    original = fastkpca.solvers.flip_signs
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        raise SolverFailure("eigensolver failed")

    for name, module in list(sys.modules.items()):
        if name.startswith("fastkpca") and getattr(module, "flip_signs", None) is original:
            monkeypatch.setattr(module, "flip_signs", failing)
    return calls


#: failure -> the failing call on a model (``fit`` unless said otherwise)
FAILURES = {
    "nan_rows": lambda m: m.fit(BAD),
    "bad_block": lambda m: m.fit([X_NEW[:200], BAD[200:]]),
    "bad_block_generator": lambda m: m.fit(iter([X_NEW[:200], BAD[200:]])),
    "wrong_width_block": lambda m: m.fit([X_NEW[:200], X_NEW[200:, :-1]]),
    "invalid_parameter": lambda m: m.set_params(kernel="no-such-kernel").fit(X_NEW),
    "fit_transform_nan": lambda m: m.fit_transform(BAD),
    "solver": lambda m: m.fit(X_NEW),
    "fit_transform_solver": lambda m: m.fit_transform(X_NEW),
}


def state_of(value):
    """A comparable picture of an attribute value (arrays copied; objects by their state)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.copy())
    if isinstance(value, dict):
        return {k: state_of(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(state_of(v) for v in value)
    if isinstance(value, Kernel):
        return ("kernel", type(value).__name__, value.get_params())
    if hasattr(value, "to_state"):  # sketches, feature maps: their meaningful state
        return ("object", type(value).__name__, state_of(value.to_state()))
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return ("object", type(value).__name__, state_of(dict(vars(value))))
    return copy.deepcopy(value)


def assert_same_state(a, b, where="model"):
    if isinstance(a, tuple) and len(a) == 3 and a[0] == "array":
        assert isinstance(b, tuple) and b[0] == "array", where
        assert a[1] == b[1] and np.array_equal(a[2], b[2], equal_nan=True), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, np.random.Generator):
        assert a.bit_generator.state == b.bit_generator.state, where
    else:
        assert a == b or (a != a and b != b), where  # nan == nan here


class Snapshot:
    """The attribute mapping of a model: the objects, and a picture of their state."""

    def __init__(self, model):
        self.objects = dict(vars(model))
        self.state = state_of(self.objects)

    def assert_unchanged(self, model):
        now = vars(model)
        assert now.keys() == self.objects.keys()
        for name, value in self.objects.items():
            # restored: the same object, not a recomputed equal one
            assert now[name] is value, name
        assert_same_state(self.state, state_of(dict(now)))


def _cases():
    for est, (_, solves) in ESTIMATORS.items():
        for failure in FAILURES:
            if "solver" in failure and not solves:
                continue  # a feature map runs no eigensolver
            for fitted in (False, True):
                yield pytest.param(est, failure, fitted, id=f"{est}-{failure}-{fitted and 'refit'}")


@pytest.mark.parametrize("est, failure, fitted", list(_cases()))
def test_failed_call_leaves_model_as_it_was(est, failure, fitted, monkeypatch):
    model = ESTIMATORS[est][0]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if fitted:
            model.fit(X)
        if failure == "invalid_parameter":
            model.set_params(kernel="no-such-kernel")  # exempt: set_params only stores it
        before = Snapshot(model)
        calls = _fail_in_solver(monkeypatch) if "solver" in failure else None
        # (fastkpca.KernelPCA, scikit-learn's drop-in, refuses a generator as scikit-learn
        # does: with a TypeError)
        with pytest.raises(SolverFailure if calls is not None else (ValueError, TypeError)):
            FAILURES[failure](model)
    if calls is not None:
        assert calls, "the failure was not raised from inside the solver"
    before.assert_unchanged(model)
    if fitted:
        # still the model it was: it transforms as before (same arrays, same code path)
        monkeypatch.undo()
        if failure == "invalid_parameter":
            model.set_params(kernel="rbf" if est != "TensorSketchFeatures" else "polynomial")
        reference = clone(model).fit(X)
        np.testing.assert_allclose(model.transform(X[:20]), reference.transform(X[:20]))


@pytest.mark.parametrize("est", ["ExactKPCA", "NystromKPCA", "StreamingKPCA", "ReducedSetKPCA"])
def test_failure_late_in_fit_restores_every_attribute(est):
    """An invalid pre-image ridge is found after the eigenpairs are stored (the last step)."""
    model = ESTIMATORS[est][0]().fit(X)
    model.set_params(fit_inverse_transform=True, alpha=-1.0)
    before = Snapshot(model)
    with pytest.raises(ValueError, match="alpha"):
        model.fit(X_NEW)
    before.assert_unchanged(model)


def test_every_estimator_class_is_covered():
    """Every saveable estimator class restores on failure in each mutating call it has."""
    import importlib

    for name, module in SAVEABLE.items():
        cls = getattr(importlib.import_module(module), name)
        if not issubclass(cls, BaseKPCA):
            continue
        for method in MUTATING_METHODS:
            if hasattr(cls, method):
                assert getattr(getattr(cls, method), "restores_on_failure", False), (
                    f"{name}.{method}"
                )


def test_compressed_model_fit_refused_unchanged():
    source = ExactKPCA(3, gamma=0.1).fit(X)
    model = compress_expansion(source, rounding=0.5, random_state=0)
    before = Snapshot(model)
    with pytest.raises(ValueError, match="compress_expansion"):
        model.fit(X)
    with pytest.raises(ValueError, match="compress_expansion"):
        model.fit_transform(X)
    before.assert_unchanged(model)


# --------------------------------------------------------------------------------------------
# StreamingKPCA: partial_fit and merge
# --------------------------------------------------------------------------------------------
def _streaming(**params):
    base = dict(n_components=3, gamma=0.1, n_random_features=40, sketch_size=6, random_state=0)
    return StreamingKPCA(**{**base, **params})


PARTIAL_FAILURES = {
    "bad_block": lambda m: m.partial_fit([X_NEW[:200], BAD[200:]]),
    "bad_block_generator": lambda m: m.partial_fit(iter([X_NEW[:200], BAD[200:]])),
    "wrong_width_block": lambda m: m.partial_fit(iter([X_NEW[:200], X_NEW[200:, :-1]])),
    "nan_rows": lambda m: m.partial_fit(BAD),
    "wrong_width": lambda m: m.partial_fit(X_NEW[:, :-1]),
}


@pytest.mark.parametrize("failure", list(PARTIAL_FAILURES))
def test_partial_fit_failure_leaves_model_as_it_was(failure):
    model = _streaming().partial_fit(X[:150]).partial_fit(X[150:])
    before = Snapshot(model)
    with pytest.raises(ValueError):
        PARTIAL_FAILURES[failure](model)
    before.assert_unchanged(model)


def test_partial_fit_after_failed_stream_continues_correctly():
    """The user report: the first block of a failed stream stayed in the sketch while
    ``n_samples_seen_`` did not count it, so the next call computed a wrong mean."""
    model = _streaming().partial_fit(X[:150])
    with pytest.raises(ValueError, match="NaN"):
        model.partial_fit(iter([X_NEW[:200], BAD[200:]]))
    model.partial_fit(X[150:])
    reference = _streaming().partial_fit(X[:150]).partial_fit(X[150:])
    assert model.n_samples_seen_ == reference.n_samples_seen_ == N
    assert model.sketch_.n_rows_seen == N
    # The same rows through the same code path: equal up to the rounding of two runs of the
    # same float64 arithmetic (1e-12 relative leaves room for a BLAS that orders sums by thread).
    np.testing.assert_allclose(model.mean_, reference.mean_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(model.mean_, X_mean_features(model, X), rtol=1e-10)


def X_mean_features(model, rows):
    """The mean of the model's random features over ``rows``, directly."""
    return np.asarray(model.feature_map_(rows), dtype=np.float64).mean(axis=0)


def test_first_partial_fit_failure_leaves_unfitted_model():
    model = _streaming()
    before = Snapshot(model)
    with pytest.raises(ValueError, match="NaN"):
        model.partial_fit(iter([X[:200], BAD[200:]]))
    before.assert_unchanged(model)
    assert not hasattr(model, "sketch_") and not hasattr(model, "n_features_in_")


def test_partial_fit_failure_inside_solver(monkeypatch):
    model = _streaming().partial_fit(X[:150])
    before = Snapshot(model)
    calls = _fail_in_solver(monkeypatch)
    with pytest.raises(SolverFailure):
        model.partial_fit(X[150:])
    assert calls
    before.assert_unchanged(model)


def _fitted_other(**params):
    rows = X_NEW[:, : params.pop("width", D)]
    return _streaming(**params).fit(rows)


MERGE_PARTNERS = {
    "seed": lambda: _fitted_other(random_state=1),
    "no_seed": lambda: _fitted_other(random_state=None),
    "features": lambda: _fitted_other(features="rff"),
    "n_random_features": lambda: _fitted_other(n_random_features=60),
    "sketch_size": lambda: _fitted_other(sketch_size=8),
    "width": lambda: _fitted_other(width=D - 1),
    "gamma": lambda: _fitted_other(gamma=0.2),
    "kernel": lambda: _fitted_other(kernel="laplacian"),
    "unfitted": lambda: _streaming(),
    "other_class": lambda: RandomFeatureKPCA(
        3, gamma=0.1, n_random_features=40, random_state=0
    ).fit(X),
}


@pytest.mark.parametrize("partner", list(MERGE_PARTNERS))
def test_merge_incompatible_raises_before_anything_changes(partner):
    model = _streaming().fit(X)
    other = MERGE_PARTNERS[partner]()
    mine, theirs = Snapshot(model), Snapshot(other)
    with pytest.raises(ValueError):
        model.merge(other)
    mine.assert_unchanged(model)
    theirs.assert_unchanged(other)


def test_merge_with_median_gamma_resolved_on_other_data_refused():
    """Same parameters, but ``gamma="median"`` resolved to different values: not mergeable."""
    a = _streaming(gamma="median").fit(X)
    b = _streaming(gamma="median").fit(X_NEW * 3.0)
    mine, theirs = Snapshot(a), Snapshot(b)
    with pytest.raises(ValueError, match="random features"):
        a.merge(b)
    mine.assert_unchanged(a)
    theirs.assert_unchanged(b)


def test_merge_leaves_both_inputs_untouched():
    a = _streaming().fit(X)
    b = _streaming().fit(X_NEW)
    mine, theirs = Snapshot(a), Snapshot(b)
    merged = a.merge(b)
    mine.assert_unchanged(a)
    theirs.assert_unchanged(b)
    assert merged.n_samples_seen_ == 2 * N
