"""Fitted arrays pinned on fixed seeds: refactors of the data path must not change any model.

The reference arrays in ``tests/data/pinned_models.npz`` were written by the code *before* the
data path was unified (``python tests/test_pinned_models.py --write``).  The default comparison
allows a tolerance relative to each array's largest entry that is set by the precision the fit
actually computes in (:func:`_working_precision`), not by the dtype of its input or output:

- float64 (``RTOL["float64"] = 1e-9``): the Gram, kernel rows and statistics are float64, so two
  CPUs or thread counts differ by the order of their BLAS sums, one unit in the last place per
  operation (~1e-16), amplified by the eigensolvers (the inverse relative eigengap) and the
  centering of kernel rows: measured at most 2e-13 between an AVX-512 and an AVX2 machine
  (``.ci/other-cpu``); 1e-9 leaves a factor 5000.
- float32 (``RTOL["float32"] = 1e-5``): float32 input, and every random-feature model
  (RandomFeatureKPCA, StreamingKPCA), whose Fourier features are computed in float32 whatever
  the input (``fastkpca.features.FOURIER_DTYPE``), and Nystrom kernel rows in float32.  numpy's
  float32 ``sin`` / ``cos`` differ between SIMD paths and float32 products between BLAS kernels
  by a few units of 6e-8, which the same amplification carries to the fitted arrays: measured
  at most 2.3e-7 between the two machines; 1e-5 leaves a factor 40 (a float64 tolerance here
  would demand digits these fits do not compute).

``FASTKPCA_PINNED_EXACT=1`` asks for bit-identical arrays instead: a claim that holds on the
machine (and BLAS thread count) that wrote the references, and is how a data-path change is
checked to change nothing at all.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

REFERENCE = Path(__file__).with_name("data") / "pinned_models.npz"
EXACT = os.environ.get("FASTKPCA_PINNED_EXACT") == "1"
RTOL = {"float64": 1e-9, "float32": 1e-5}


def _data():
    from fastkpca.datasets import make_random_noisy

    X = make_random_noisy(700, 12, signal_dim=6, zeta=10, random_state=3)
    return X[:600], X[600:]


def _blocks(X, size):
    return [X[i : i + size] for i in range(0, X.shape[0], size)]


def _cases():
    """name -> (estimator factory, training input builder)."""
    from fastkpca import (
        ExactKPCA,
        NystromKPCA,
        RandomFeatureKPCA,
        ReducedSetKPCA,
        SparsifiedKPCA,
        StreamingKPCA,
    )

    def f32(X):
        return X.astype(np.float32)

    def csr(X):
        Y = X.copy()
        Y[np.abs(Y) < 0.5] = 0.0
        return sp.csr_matrix(Y)

    def same(X):
        return X

    return {
        "rf_exact": (lambda: RandomFeatureKPCA(5, n_random_features=64, random_state=0), same),
        "rf_exact_f32": (lambda: RandomFeatureKPCA(5, n_random_features=64, random_state=1), f32),
        "rf_exact_median": (
            lambda: RandomFeatureKPCA(5, n_random_features=64, gamma="median", random_state=2),
            same,
        ),
        "rf_countsketch": (
            lambda: RandomFeatureKPCA(
                5, n_random_features=64, solver="countsketch", n_buckets=80, random_state=3
            ),
            same,
        ),
        "rf_countsketch_1pass_csr": (
            lambda: RandomFeatureKPCA(
                5,
                n_random_features=64,
                features="rff",
                solver="countsketch",
                n_buckets=80,
                n_passes=1,
                random_state=4,
            ),
            csr,
        ),
        "rf_blocks": (
            lambda: RandomFeatureKPCA(5, n_random_features=64, random_state=0),
            lambda X: _blocks(X, 128),
        ),
        "streaming": (
            lambda: StreamingKPCA(5, n_random_features=64, sketch_size=12, random_state=5),
            same,
        ),
        "streaming_f32": (
            lambda: StreamingKPCA(5, n_random_features=64, sketch_size=12, random_state=6),
            f32,
        ),
        "streaming_blocks": (
            lambda: StreamingKPCA(5, n_random_features=64, sketch_size=12, random_state=5),
            lambda X: _blocks(X, 100),
        ),
        "nystrom_uniform": (lambda: NystromKPCA(5, n_landmarks=50, random_state=7), same),
        "nystrom_scale_f32": (
            lambda: NystromKPCA(5, n_landmarks=50, gamma="scale", random_state=8),
            f32,
        ),
        "nystrom_kmeans": (
            lambda: NystromKPCA(5, n_landmarks=30, landmarks="kmeans", random_state=9),
            same,
        ),
        "nystrom_rls": (
            lambda: NystromKPCA(5, n_landmarks=40, landmarks="rls", random_state=10),
            same,
        ),
        "nystrom_weighted": (
            lambda: NystromKPCA(
                5, n_landmarks=30, landmarks="kmeans", covariance="landmarks", random_state=11
            ),
            same,
        ),
        "nystrom_csr": (lambda: NystromKPCA(5, n_landmarks=50, random_state=12), csr),
        "nystrom_blocks": (
            lambda: NystromKPCA(5, n_landmarks=50, random_state=7),
            lambda X: _blocks(X, 128),
        ),
        "exact": (lambda: ExactKPCA(5, random_state=13), same),
        "exact_lanczos_f32": (lambda: ExactKPCA(5, eigen_solver="lanczos", random_state=14), f32),
        "reduced_set": (lambda: ReducedSetKPCA(5, random_state=15), same),
        "sparsified": (lambda: SparsifiedKPCA(5, sample_prob=0.5, random_state=16), same),
    }


def _fingerprint(name, model, X_test):
    out = {f"{name}/transform": np.asarray(model.transform(X_test))}
    for attr in (
        "eigenvalues_",
        "components_",
        "mean_",
        "eigenvectors_",
        "landmarks_",
        "normalization_",
        "centers_",
        "weights_",
    ):
        value = getattr(model, attr, None)
        if isinstance(value, np.ndarray):
            out[f"{name}/{attr}"] = value
    return out


def _working_precision(name, model) -> str:
    """``"float32"`` where the fit's numbers pass through float32 (float32 input, float32
    random Fourier features, float32 Nystrom kernel rows), else ``"float64"``."""
    if name.endswith("f32"):
        return "float32"
    fmap = getattr(model, "feature_map_", None)
    if fmap is not None and np.dtype(fmap.feature_dtype(np.dtype(np.float64))) == np.float32:
        return "float32"
    if getattr(model, "kernel_row_dtype_", "float64") == "float32":
        return "float32"
    return "float64"


def _fit_model(name):
    make, build = _cases()[name]
    X, X_test = _data()
    model = make().fit(build(X))
    dtype = np.float32 if name.endswith("f32") else np.float64
    return _fingerprint(name, model, X_test.astype(dtype)), model


def _fit(name):
    return _fit_model(name)[0]


def test_working_precision_of_the_cases():
    # The random-feature models compute in float32 whatever their input; the kernel-row
    # methods on float64 input in float64.
    models = {name: _fit_model(name)[1] for name in ("rf_exact", "streaming", "exact")}
    assert _working_precision("rf_exact", models["rf_exact"]) == "float32"
    assert _working_precision("streaming", models["streaming"]) == "float32"
    assert _working_precision("exact", models["exact"]) == "float64"


@pytest.mark.parametrize("name", sorted(_cases()))
def test_model_unchanged(name):
    reference = np.load(REFERENCE)
    got, model = _fit_model(name)
    assert sorted(got) == sorted(k for k in reference.files if k.startswith(f"{name}/"))
    rtol = RTOL[_working_precision(name, model)]
    for key, value in got.items():
        expected = reference[key]
        assert value.dtype == expected.dtype, key
        assert value.shape == expected.shape, key
        if EXACT:
            np.testing.assert_array_equal(value, expected, err_msg=key)
        else:
            scale = max(float(np.max(np.abs(expected), initial=0.0)), 1e-300)
            np.testing.assert_allclose(value, expected, rtol=0, atol=rtol * scale, err_msg=key)


if __name__ == "__main__" and sys.argv[1:2] == ["--write"]:
    # ``--write``: every case; ``--write CASE ...``: only those cases' arrays, the others kept
    # (for an intended change of one estimator's models, in its own commit).
    cases = sys.argv[2:] or sorted(_cases())
    unknown = sorted(set(cases) - set(_cases()))
    if unknown:
        sys.exit(f"unknown cases {unknown}; known: {sorted(_cases())}")
    arrays = {}
    if sys.argv[2:]:
        with np.load(REFERENCE) as old:
            arrays = {k: old[k] for k in old.files if k.split("/")[0] not in cases}
    for case in cases:
        arrays.update(_fit(case))
    np.savez_compressed(REFERENCE, **arrays)
    print(f"wrote {len(cases)} cases ({len(arrays)} arrays in all) to {REFERENCE}")
