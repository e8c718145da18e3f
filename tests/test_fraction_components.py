"""A fractional ``n_components`` (a share of the total variance) keeps about as many components
as exact KPCA keeps, and never components the model cannot give (issue 32)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fastkpca import ExactKPCA, NystromKPCA


@pytest.fixture(scope="module")
def gaussian():
    # Gaussian rows, rbf at gamma = 1 / n_features: a slowly decaying spectrum, where 90% of
    # the variance takes a few hundred components (exact KPCA: 334 of 3000 at n = 3000)
    return np.random.default_rng(0).standard_normal((2500, 10))


def test_exact_kpca_keeps_the_smallest_count_reaching_the_fraction(gaussian):
    model = ExactKPCA(0.9).fit(gaussian)
    ratio = np.cumsum(model.explained_variance_ratio_)
    assert ratio[-1] >= 0.9 > ratio[-2]
    assert 100 < model.n_components_ < 1000


def test_nystrom_fraction_keeps_what_its_exact_solver_keeps(gaussian):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = NystromKPCA(0.9, random_state=0).fit(gaussian)
    exact = NystromKPCA(0.9, solver="exact", random_state=0).fit(gaussian)
    assert exact.n_components_ < 1000  # the 1000 landmarks do reach 0.9
    assert np.all(auto.eigenvalues_ > 0)  # never a component the model cannot give
    assert abs(auto.n_components_ - exact.n_components_) <= 0.1 * exact.n_components_


def test_unreached_fraction_keeps_no_zero_component(gaussian):
    # The one-pass sketch of q = 20 columns has at most 20 non-zero eigenvalues: 0.99 of the
    # variance is out of its reach, and the components it cannot give are not kept.
    with pytest.warns(UserWarning, match="less than n_components=0.99"):
        model = NystromKPCA(0.99, solver="randomized", sketch_size=20, random_state=0)
        model.fit(gaussian)
    assert 1 <= model.n_components_ <= 20
    assert np.all(model.eigenvalues_ > 0)
    assert model.components_.shape[0] == model.projection_.shape[1] == model.n_components_
