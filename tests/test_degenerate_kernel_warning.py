"""DegenerateKernelWarning: every method that sees the same rows with the same kernel must agree
on whether their kernel matrix is degenerate (issue 32).

Exact KPCA decides from the exact trace and mean of the kernel matrix; the methods that only
estimate its mean decide, when the estimate leaves it open, from the exact Gram of the first
rows (``fastkpca.kernels.first_rows_gram``), which on up to 2000 rows is exact KPCA's decision.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fastkpca
from fastkpca import (
    ExactKPCA,
    NystromKPCA,
    RandomFeatureKPCA,
    ReducedSetKPCA,
    SparsifiedKPCA,
    StreamingKPCA,
)
from fastkpca.kernels import (
    RBF,
    DegenerateKernelWarning,
    first_rows_gram,
    may_be_degenerate,
    scaled_gram,
)

MAKERS = {
    "exact": lambda: ExactKPCA(3),
    "nystrom": lambda: NystromKPCA(3, random_state=0),
    "random_features": lambda: RandomFeatureKPCA(3, random_state=0),
    "streaming": lambda: StreamingKPCA(3, random_state=0),
}
#: Other estimates of the mean: a probe (reduced set), the sampled Gram (sparsified), weighted
#: landmarks with no standard error (k-means Nystrom).
MORE_MAKERS = {
    "nystrom_kmeans": lambda: NystromKPCA(3, landmarks="kmeans", random_state=0),
    "reduced_set": lambda: ReducedSetKPCA(3, density="kmeans", n_centers=50, random_state=0),
    "sparsified": lambda: SparsifiedKPCA(3, random_state=0),
}


def _warned(make, X) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make().fit(X)
    return any(issubclass(w.category, DegenerateKernelWarning) for w in caught)


def _unscaled(scale):
    # 10 Gaussian columns times `scale`, rbf with the default gamma = 1 / n_features: the
    # larger the scale, the farther apart the rows are at that gamma
    return np.random.default_rng(0).standard_normal((1500, 10)) * scale


def test_every_method_warns_on_a_numerically_identity_kernel_matrix():
    X = _unscaled(10.0)  # the rows' kernel values with each other: ~0 of their own
    assert {name: _warned(make, X) for name, make in MAKERS.items()} == dict.fromkeys(MAKERS, True)


@pytest.mark.parametrize("scale", [4.0, 6.0])
def test_methods_agree_on_whether_the_kernel_matrix_is_degenerate(scale):
    # At these scales the rows' kernel values with each other sum to a few % of their values
    # with themselves: exact KPCA (the reference: its statistics are exact) does not warn.
    X = _unscaled(scale)
    warned = {name: _warned(make, X) for name, make in MAKERS.items()}
    assert warned == dict.fromkeys(MAKERS, warned["exact"])


@pytest.mark.parametrize("scale", [1e-6, 4.0, 10.0])
def test_other_estimates_of_the_mean_agree_too(scale):
    X = _unscaled(scale)  # 1e-6: numerically constant; 4: fine; 10: numerically the identity
    expected = _warned(MAKERS["exact"], X)
    assert expected == (scale != 4.0)
    assert {name: _warned(make, X) for name, make in MORE_MAKERS.items()} == dict.fromkeys(
        MORE_MAKERS, expected
    )


@pytest.mark.parametrize("scale", [4.0, 10.0])
def test_partial_fit_decides_as_fit(scale):
    # Later calls have only their own rows: the first rows' Gram, kept from the first call,
    # decides for the rows seen so far.
    X = _unscaled(scale)
    expected = _warned(MAKERS["exact"], X)
    model = StreamingKPCA(3, n_random_features=256, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for start in range(0, 1500, 500):
            model.partial_fit(X[start : start + 500])
    flags = [issubclass(w.category, DegenerateKernelWarning) for w in caught]
    assert any(flags) == expected
    if expected:
        assert "1500 training rows" in str(
            [w.message for w in caught if issubclass(w.category, DegenerateKernelWarning)][-1]
        )


def test_a_loaded_model_continues_without_the_first_rows(tmp_path):
    # A model file keeps no rows: partial_fit after load decides from its estimate (no error).
    X = _unscaled(4.0)
    model = StreamingKPCA(3, n_random_features=256, random_state=0).fit(X[:1000])
    model.save(tmp_path / "m.npz")
    loaded = fastkpca.load(tmp_path / "m.npz")
    loaded.partial_fit(X[1000:])
    assert loaded.n_samples_seen_ == 1500


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_the_training_rows_are_not_kept(name):
    # The source of the rows is held only while the call runs (it holds the data).
    import pickle

    model = MAKERS[name]().fit(_unscaled(1.0)[:300])
    assert not any("source" in key for key in vars(model))
    pickle.loads(pickle.dumps(model))


def test_first_rows_gram_is_exact_on_up_to_2000_rows(namespace):
    X = _unscaled(1.0)[:300]
    kernel = RBF(0.1)
    K = kernel(X)
    a, b = first_rows_gram(kernel, namespace.to_ns(X))
    np.testing.assert_allclose(a, 1.0, rtol=1e-14)
    np.testing.assert_allclose(b, (K.sum() - np.trace(K)) / (300 * 299), rtol=1e-12)
    diag_sum, mean_sq = scaled_gram(300, a, b)
    np.testing.assert_allclose(diag_sum, np.trace(K), rtol=1e-14)
    np.testing.assert_allclose(mean_sq, K.mean(), rtol=1e-12)


def test_an_estimate_decides_only_when_it_can():
    kernel = RBF(1.0)
    # far from degenerate, however it is estimated: no first-rows Gram is needed
    assert not may_be_degenerate(kernel, 1000, 1000.0, 0.5, 1e-4)
    # within three standard errors of the identity (T = S: mean_sq = S / n^2)
    assert may_be_degenerate(kernel, 1000, 1000.0, 1.0e-3, 1e-4)
    # an unknown error, or one so large that the identity is within its reach
    assert may_be_degenerate(kernel, 1000, 1000.0, 0.5, float("nan"))
    assert may_be_degenerate(kernel, 1000, 1000.0, 0.5, 1.0)
    # a large error whose reach still excludes both (T - S and tr(HKH) far above it)
    assert not may_be_degenerate(kernel, 20000, 20000.0, 0.5, 3e-3)
