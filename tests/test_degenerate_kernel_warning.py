"""DegenerateKernelWarning: every method that sees the same rows with the same kernel must agree
on whether their kernel matrix is degenerate (issue 32)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fastkpca import ExactKPCA, NystromKPCA, RandomFeatureKPCA, StreamingKPCA
from fastkpca.kernels import DegenerateKernelWarning

MAKERS = {
    "exact": lambda: ExactKPCA(3),
    "nystrom": lambda: NystromKPCA(3, random_state=0),
    "random_features": lambda: RandomFeatureKPCA(3, random_state=0),
    "streaming": lambda: StreamingKPCA(3, random_state=0),
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


@pytest.mark.xfail(
    strict=False,
    reason="warn_if_degenerate (kernels.py) counts an estimated mean embedding as degenerate "
    "within three of its standard errors; random features' standard error is ~15% of the "
    "trace at these sizes, against the 0.1% identity threshold exact and Nystrom use, so "
    "RandomFeatureKPCA and StreamingKPCA warn on matrices exact KPCA finds fine",
)
@pytest.mark.parametrize("scale", [4.0, 6.0])
def test_methods_agree_on_whether_the_kernel_matrix_is_degenerate(scale):
    # At these scales the rows' kernel values with each other sum to a few % of their values
    # with themselves: exact KPCA (the reference: its statistics are exact) does not warn.
    X = _unscaled(scale)
    warned = {name: _warned(make, X) for name, make in MAKERS.items()}
    assert warned == dict.fromkeys(MAKERS, warned["exact"])
