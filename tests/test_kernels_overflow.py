"""Ordinary inputs whose kernel cannot be computed in float64 give one ValueError naming the
cause before any fit work (issue 32, section 3): ``gamma="scale"`` on entries whose variance
overflows, a polynomial kernel whose values overflow at its degree."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import fastkpca
from fastkpca import kernels as fk
from fastkpca.kernels import entry_variance, make_kernel, resolve_gamma

ESTIMATORS = [
    "AutoKPCA",
    "ExactKPCA",
    "NystromKPCA",
    "RandomFeatureKPCA",
    "StreamingKPCA",
    "ReducedSetKPCA",
    "SparsifiedKPCA",
]

_RNG = np.random.default_rng(0)
#: Rows at +-1e308: the entries are finite, their variance (1e616) is not.
HUGE = np.where(_RNG.random((60, 3)) > 0.5, 1e308, -1e308)
ROWS = _RNG.standard_normal((60, 3))

SCALE_OVERFLOW = "gamma='scale'.*the data's variance overflows float64.*scale the data"
POLY_OVERFLOW = "polynomial kernel: kernel values overflow float64 at degree=1000.*lower degree"


def _estimator(name, **kwargs):
    if name == "ReducedSetKPCA":
        kwargs["density"] = "kmeans"  # the shadow density needs a radial kernel
    return getattr(fastkpca, name)(n_components=2, random_state=0, **kwargs)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_scale_gamma_on_entries_whose_variance_overflows(name):
    with pytest.raises(ValueError, match=SCALE_OVERFLOW):
        _estimator(name, gamma="scale").fit(HUGE)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_polynomial_values_that_overflow_at_their_degree(name):
    with pytest.raises(ValueError, match=POLY_OVERFLOW):
        _estimator(name, kernel="poly", degree=1000).fit(ROWS)


def test_errors_come_from_the_kernel_before_any_fit_work():
    # make_kernel on the rows a fit resolves its kernel on raises them: the estimators call it
    # first (so a fit never reaches a pass over the data, nor a feature map)
    with pytest.raises(ValueError, match=SCALE_OVERFLOW):
        make_kernel("rbf", gamma="scale", X=HUGE)
    with pytest.raises(ValueError, match=SCALE_OVERFLOW):
        make_kernel("rbf", gamma="scale", X=sp.csr_matrix(HUGE))
    with pytest.raises(ValueError, match=POLY_OVERFLOW):
        make_kernel("poly", degree=1000, X=ROWS)
    with pytest.raises(ValueError, match=POLY_OVERFLOW):
        make_kernel(fk.Polynomial(degree=1000), X=ROWS)  # a Kernel object too


@pytest.mark.parametrize("name", ["RandomFeatureKPCA", "StreamingKPCA"])
def test_a_stream_is_refused_on_its_first_rows(name):
    # the kernel is resolved on the first rows: the error comes before the pass over the data
    read = []

    def blocks():
        for i in range(3):
            read.append(i)
            yield _RNG.standard_normal((10_000, 3))

    with pytest.raises(ValueError, match=POLY_OVERFLOW):
        _estimator(name, kernel="poly", degree=1000).fit(blocks())
    assert read == [0]


def test_polynomial_overflow_is_decided_exactly():
    # degree 2, coef0 0: the largest value is |x|^4, which float64 holds up to 1.8e308
    kernel = fk.Polynomial(degree=2, gamma=1.0, coef0=0.0)
    fits = np.array([[1e77, 0.0], [0.0, 1.0]])  # |x|^4 = 1e308
    kernel.check_rows(fits)
    assert np.isfinite(kernel(fits)).all()
    over = np.array([[1.2e77, 0.0], [0.0, 1.0]])  # |x|^4 = 2.1e308
    with pytest.raises(ValueError, match="overflow float64 at degree=2"):
        kernel.check_rows(over)
    with pytest.raises(ValueError, match="overflow float64 at degree=2"):
        kernel(over)  # a block computed without the check names the same cause
    # coef0^degree alone: every row's value with itself overflows
    with pytest.raises(ValueError, match="degree=1000"):
        make_kernel("poly", degree=1000, coef0=3.0, X=np.zeros((2, 1)))
    make_kernel("poly", degree=1000, coef0=1.0, X=np.zeros((2, 1)))  # 1^1000 = 1


def test_scale_gamma_where_only_the_sums_overflow():
    # Constant rows at 1e306: the mean's sum overflows, the variance is 0 (gamma 1, as for any
    # constant data); rows up to 1e154 have a variance float64 holds.
    constant = np.full((1000, 2), 1e306)
    assert entry_variance(constant) == 0.0
    assert resolve_gamma("scale", constant) == 1.0
    big = np.array([[1e154, -1e154], [-1e154, 1e154]])
    assert entry_variance(big) == pytest.approx(1e308, rel=1e-12)
    assert resolve_gamma("scale", big) == pytest.approx(1 / (2 * 1e308), rel=1e-12)


def test_scale_gamma_of_a_variance_too_small_for_it():
    tiny = np.array([[0.0], [2e-160]])  # variance 1e-320 (subnormal): 1 / it overflows
    with pytest.raises(ValueError, match="too small"):
        resolve_gamma("scale", tiny)


def test_entry_variance_is_numpys_on_ordinary_data(namespace):
    X = _RNG.standard_normal((50, 4)) * 3 + 1
    expected = float(np.var(X))
    assert entry_variance(X) == pytest.approx(expected, rel=1e-15)
    assert entry_variance(sp.csr_matrix(X)) == pytest.approx(expected, rel=1e-12)
    assert entry_variance(namespace.to_ns(X)) == pytest.approx(expected, rel=1e-12)
    # float32 rows: the variance of their values, in float64
    X32 = X.astype(np.float32)
    assert entry_variance(namespace.to_ns(X32)) == pytest.approx(
        float(np.var(X32.astype(np.float64))), rel=1e-12
    )


def test_scale_gamma_overflow_on_every_namespace(namespace):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match=SCALE_OVERFLOW):
            fastkpca.ExactKPCA(2, gamma="scale").fit(namespace.to_ns(HUGE))
    with pytest.raises(ValueError, match=POLY_OVERFLOW):
        fastkpca.NystromKPCA(2, kernel="poly", degree=1000, random_state=0).fit(
            namespace.to_ns(ROWS)
        )


def test_ordinary_polynomial_fits_are_unchanged():
    model = fastkpca.ExactKPCA(2, kernel="poly", degree=3).fit(ROWS)
    assert math.isfinite(float(model.eigenvalues_[0]))
