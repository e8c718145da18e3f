"""ReducedSetKPCA against exact KPCA: the exact limit, convergence in ell, densities, contract."""

import numpy as np
import pytest
from sklearn.decomposition import KernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from fastkpca import ExactKPCA, ReducedSetKPCA
from fastkpca.kernels import Kernel
from fastkpca.metrics import embedding_error, mmd
from tests.test_compress import RTOL, assert_same_model, noisy_split


def clusters(seed=0, n=600, d=5, k=5):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((k, d)) * 3
    X = np.vstack([c + rng.standard_normal((n // k, d)) for c in centers])
    return X[rng.permutation(len(X))]


@pytest.fixture(scope="module")
def split():
    """Train / held-out points and the exact KPCA of the training part (rbf, gamma 0.05)."""
    X = clusters(n=700)
    Xtr, Xte = X[:600], X[600:]
    exact = ExactKPCA(5, gamma=0.05).fit(Xtr)
    return Xtr, Xte, exact, exact.transform(Xte)


# --- exact limit ----------------------------------------------------------------------------
@pytest.mark.parametrize("center", ["centroid", "first"])
@pytest.mark.parametrize("kernel", ["rbf", "laplacian", "matern"])
def test_duplicates_tiny_radius_is_exact(kernel, center):
    # 80 distinct rows repeated to 400: with a radius far below the distance between distinct
    # rows, the shadow sets are exactly the groups of duplicates, the weighted 80 x 80 problem is
    # exact KPCA on the 400 rows (module notes), and only rounding separates the two: the two
    # eigensolves see differently-rounded matrices, so 1e-9 relative (both run in float64, the
    # spectrum here has gaps > 1e-2 relative, eigenvectors are accurate to ~1e-13 / gap).
    rng = np.random.default_rng(1)
    U = rng.standard_normal((80, 4))
    X = U[rng.integers(0, 80, 400)]
    Xn = rng.standard_normal((30, 4))
    exact = ExactKPCA(6, kernel=kernel, gamma=0.2).fit(X)
    model = ReducedSetKPCA(6, kernel=kernel, gamma=0.2, ell=1e7, center=center).fit(X)
    assert model.n_centers_ == len(np.unique(X, axis=0))
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_, rtol=1e-9)
    for Z in (X, Xn):
        A, B = exact.transform(Z), model.transform(Z)
        # same column signs too: the sign rule is ExactKPCA's, applied to the quantised data
        np.testing.assert_allclose(B, A, atol=1e-9 * np.abs(A).max())


def test_exact_limit_matches_sklearn():
    rng = np.random.default_rng(2)
    X = np.repeat(rng.standard_normal((60, 3)), 3, axis=0)
    kp = KernelPCA(4, kernel="rbf", gamma=0.3, eigen_solver="dense").fit(X)
    model = ReducedSetKPCA(4, gamma=0.3, ell=1e7).fit(X)
    np.testing.assert_allclose(model.eigenvalues_, kp.eigenvalues_, rtol=1e-9)
    A, B = kp.transform(X), model.transform(X)
    B *= np.sign(np.sum(A * B, axis=0))  # sklearn's signs are arbitrary
    np.testing.assert_allclose(B, A, atol=1e-9 * np.abs(A).max())


# --- convergence in ell ---------------------------------------------------------------------
def test_large_ell_close_to_exact(split):
    # ell = 200: radius sigma / 200 = 0.016 on unit-variance clusters keeps every point as a
    # centre but for a few pairs, so the answer is exact up to O((r / sigma)^2) ~ 1e-4 terms.
    Xtr, Xte, exact, ref = split
    model = ReducedSetKPCA(5, gamma=0.05, ell=200.0).fit(Xtr)
    assert model.n_centers_ > 0.95 * len(Xtr)
    assert embedding_error(model.transform(Xte), ref, align="sign") < 1e-3
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_, rtol=1e-3)


def test_error_decreases_with_ell(split):
    # Theorems 5.1-5.4: the errors are controlled by ell.  Measured on this data for
    # ell = 1, 1.5, 2, 3, 4: m = 38, 122, 223, 416, 544 of 600; embedding error 0.19, 0.076,
    # 0.030, 0.0075, 0.0025.  Asserted: m grows, the errors (embedding, eigenvalues, MMD) fall
    # at every step.
    Xtr, Xte, exact, ref = split
    ms, emb, eig, dist = [], [], [], []
    for ell in (1.0, 1.5, 2.0, 3.0, 4.0):
        model = ReducedSetKPCA(5, gamma=0.05, ell=ell).fit(Xtr)
        ms.append(model.n_centers_)
        emb.append(embedding_error(model.transform(Xte), ref))
        eig.append(np.abs(model.eigenvalues_ - exact.eigenvalues_).max() / exact.eigenvalues_[0])
        dist.append(mmd(Xtr, model.centers_, model.weights_, model.kernel_))
    assert np.all(np.diff(ms) > 0)
    assert np.all(np.diff(emb) < 0) and emb[-1] < 0.01
    assert np.all(np.diff(eig) < 0) and eig[-1] < 0.01
    assert np.all(np.diff(dist) < 0)


def test_centroid_beats_first():
    # The measurement behind center="centroid": same shadow sets (same m, same weights), the
    # centroid as representative gives embeddings closer to exact KPCA.  Measured on 4 data sets
    # (mean embedding error, ell = 2 / 3 / 4): first 0.088 / 0.045 / 0.015, centroid
    # 0.033 / 0.007 / 0.002.  The eigenvalues go the other way at small ell (relative l2 error
    # first 0.018 / 0.008 / 0.003, centroid 0.074 / 0.013 / 0.003): collapsing a set on its mean
    # overstates the leading eigenvalues by O(eps^2); by the default ell = 4 they are equal.
    emb = {"first": [], "centroid": []}
    eig = {"first": [], "centroid": []}
    for seed in range(4):
        X = clusters(seed, n=700)
        Xtr, Xte = X[:600], X[600:]
        exact = ExactKPCA(5, gamma=0.05).fit(Xtr)
        ref = exact.transform(Xte)
        for center in emb:
            models = [
                ReducedSetKPCA(5, gamma=0.05, ell=ell, center=center).fit(Xtr)
                for ell in (2.0, 3.0, 4.0)
            ]
            emb[center].append([embedding_error(m.transform(Xte), ref) for m in models])
            eig[center].append(
                [
                    np.linalg.norm(m.eigenvalues_ - exact.eigenvalues_)
                    / np.linalg.norm(exact.eigenvalues_)
                    for m in models
                ]
            )
    first, centroid = np.mean(emb["first"], axis=0), np.mean(emb["centroid"], axis=0)
    assert np.all(centroid < first / 2)
    # at ell = 4 the eigenvalue errors agree within a factor 1.5 (both about 0.003)
    e_first, e_centroid = np.mean(eig["first"], axis=0), np.mean(eig["centroid"], axis=0)
    assert e_centroid[-1] < 1.5 * e_first[-1] and e_centroid[-1] < 0.01


# --- the other densities --------------------------------------------------------------------
def test_densities_vs_uniform(split):
    # At the same m, kmeans and herding (good density estimates) beat uniform subsampling;
    # paring (with-replacement subsampling) is not better than uniform: measured mean errors
    # over 3 seeds at m = 60: uniform 0.24, kmeans 0.066, herding 0.083, paring 0.23.
    Xtr, Xte, exact, ref = split
    m = 60
    err = {}
    for density in ("uniform", "kmeans", "herding", "paring"):
        err[density] = np.mean(
            [
                embedding_error(
                    ReducedSetKPCA(5, gamma=0.05, density=density, n_centers=m, random_state=s)
                    .fit(Xtr)
                    .transform(Xte),
                    ref,
                )
                for s in range(3)
            ]
        )
    assert err["kmeans"] < err["uniform"] / 2
    assert err["herding"] < err["uniform"] / 2
    assert err["paring"] < 2.5 * err["uniform"]
    assert max(err.values()) < 0.5


@pytest.mark.parametrize("density", ["shadow", "kmeans", "paring", "herding", "uniform"])
def test_weights_and_state(split, density):
    Xtr = split[0]
    n = len(Xtr)
    model = ReducedSetKPCA(
        4, gamma=0.05, density=density, n_centers=50, ell=2.0, random_state=0
    ).fit(Xtr)
    m = model.n_centers_
    assert model.centers_.shape == (m, Xtr.shape[1])
    assert model.weights_.shape == (m,) and np.all(model.weights_ > 0)
    # probability weights, summing to 1 (documented); counts for shadow, kmeans and uniform
    np.testing.assert_allclose(model.weights_.sum(), 1.0, rtol=1e-12)
    if density in ("shadow", "kmeans", "uniform"):
        counts = model.weights_ * n
        np.testing.assert_allclose(counts, np.round(counts), atol=1e-9)
    if density != "shadow":
        assert m <= 50
    assert model.n_samples_fit_ == n
    # no array of n rows is kept (transform is O(m)); fitted state is arrays, scalars, Kernel
    for name, value in vars(model).items():
        if not name.endswith("_") or name.startswith("_"):
            continue
        assert isinstance(value, np.ndarray | int | float | str | type(None) | Kernel), name
        if isinstance(value, np.ndarray):
            assert value.shape[0] in (m, model.n_components_), name


def test_eigenvalue_scale(split):
    # eigenvalues_ are on the scale of the centered n x n training Gram (KernelPCA's), not of
    # the m x m one: uniform subsamples of m = 300 of the 600 points, averaged over 8 seeds,
    # are within 3 % of exact on the top four (measured 0.5-1.6 %) and 10 % on the fifth
    # (measured 6.9 %; it is 5 times smaller).  Without the n scaling they would be 2x off.
    Xtr, _, exact, _ = split
    ratio = np.mean(
        [
            ReducedSetKPCA(5, gamma=0.05, density="uniform", n_centers=300, random_state=s)
            .fit(Xtr)
            .eigenvalues_
            / exact.eigenvalues_
            for s in range(8)
        ],
        axis=0,
    )
    np.testing.assert_allclose(ratio[:4], 1.0, atol=0.03)
    np.testing.assert_allclose(ratio[4], 1.0, atol=0.10)


def test_same_seed_same_result(split):
    Xtr = split[0]
    for density in ("kmeans", "herding", "paring", "uniform"):
        a = ReducedSetKPCA(3, density=density, n_centers=40, random_state=7).fit_transform(Xtr)
        b = ReducedSetKPCA(3, density=density, n_centers=40, random_state=7).fit_transform(Xtr)
        if density == "kmeans":
            # scikit-learn's KMeans adds its per-thread centre sums in the order its 3+ OpenMP
            # threads finish: centres a few ulps apart run to run, amplified by the inverse
            # eigengap (~60 here; measured 2e-14 of max |T| with OMP_NUM_THREADS=8)
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * np.abs(a).max())
        else:
            np.testing.assert_array_equal(a, b)  # no threaded reduction: the same call twice


def test_float32(split):
    # float32 in -> float32 out, centres float32; the m x m problem is solved in float64, so the
    # only float32 error is in the kernel blocks and the final product: 1e-4 of the largest
    # projection (float32 eps 6e-8 times the ~100 terms of magnitude <= 1 summed per entry).
    Xtr, Xte, _, _ = split
    m64 = ReducedSetKPCA(5, gamma=0.05, ell=2.0).fit(Xtr)
    m32 = ReducedSetKPCA(5, gamma=0.05, ell=2.0).fit(Xtr.astype(np.float32))
    assert m32.centers_.dtype == np.float32
    T32 = m32.transform(Xte.astype(np.float32))
    assert T32.dtype == np.float32
    assert m64.n_centers_ == m32.n_centers_
    T64 = m64.transform(Xte)
    np.testing.assert_allclose(T32, T64, atol=1e-4 * np.abs(T64).max())


def test_save_load_and_expansion(split, tmp_path):
    import fastkpca
    from fastkpca.decomposition.compress import kernel_expansion

    Xtr, Xte, _, _ = split
    model = ReducedSetKPCA(4, gamma=0.05, ell=2.0).fit(Xtr)
    T = model.transform(Xte)
    # the model file holds only arrays, scalars and the kernel: it reloads to the same transform
    model.save(tmp_path / "rs.fkpca")
    np.testing.assert_array_equal(fastkpca.load(tmp_path / "rs.fkpca").transform(Xte), T)
    # the kernel expansion (centering folded into the coefficients) is the same map, to rounding
    exp = kernel_expansion(model)
    assert exp.points.shape[0] == model.n_centers_
    np.testing.assert_allclose(
        exp.kernel(Xte, exp.points) @ exp.coef + exp.offset, T, atol=1e-10 * np.abs(T).max()
    )


# --- bad input ------------------------------------------------------------------------------
def test_bad_input(split):
    Xtr = split[0]
    X = Xtr[:50]
    cases = [
        (dict(density="pca"), "density"),
        (dict(center="median"), "center"),
        (dict(ell=0.0), "ell"),
        (dict(ell=-1.0), "ell"),
        (dict(density="kmeans", n_centers=0), "n_centers"),
        (dict(density="kmeans", n_centers=51), "n_centers"),
        (dict(kernel="polynomial"), "radial kernel"),
        (dict(kernel="cosine"), "radial kernel"),
        (dict(n_components=200, gamma=0.05, ell=0.5), "increase ell"),
        (dict(n_components=30, density="uniform", n_centers=20), "n_components"),
        (dict(eigen_solver="qr"), "eigen_solver"),
    ]
    for params, match in cases:
        with pytest.raises(ValueError, match=match):
            ReducedSetKPCA(**params).fit(X)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ReducedSetKPCA().fit(bad)
    with pytest.raises(ValueError):
        ReducedSetKPCA().fit(X[:0])
    model = ReducedSetKPCA(3).fit(X)
    with pytest.raises(ValueError, match="features"):
        model.transform(X[:, :3])
    with pytest.raises(NotFittedError):
        ReducedSetKPCA().transform(X)
    # the non-shadow densities take any kernel
    T = ReducedSetKPCA(
        3, kernel="polynomial", density="kmeans", n_centers=20, random_state=0
    ).fit_transform(X)
    assert T.shape == (50, 3)


# --- scikit-learn contract ------------------------------------------------------------------
@parametrize_with_checks(
    [
        ReducedSetKPCA(),
        ReducedSetKPCA(density="kmeans", n_centers=10, random_state=0),
        ReducedSetKPCA(density="herding", n_centers=10, random_state=0),
        ReducedSetKPCA(density="paring", n_centers=10, random_state=0),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# --- array namespaces (numpy, PyTorch's CPU, array_api_strict; CUDA under ``gpu``) --------------
# Tolerances as in tests/test_compress.py (RTOL): the densities run on host copies with the host
# generator, so every namespace gets the same centres; only the kernel values' rounding differs.


@pytest.fixture(scope="module")
def noisy():
    """tests/test_compress.py's data."""
    return noisy_split()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("density", ["shadow", "kmeans", "paring", "herding", "uniform"])
def test_every_namespace_gives_the_numpy_model(density, dtype, namespace, noisy):
    X, X_new = (a.astype(dtype) for a in noisy)
    params = dict(gamma=0.1, density=density, n_centers=40, random_state=0)
    host = ReducedSetKPCA(3, **params).fit(X)
    model = ReducedSetKPCA(3, **params).fit(namespace.to_ns(X))
    assert_same_model(host, model, X_new, namespace, RTOL[dtype])
    assert model.n_centers_ == host.n_centers_
    np.testing.assert_allclose(namespace.from_ns(model.centers_), host.centers_, rtol=1e-12)
    np.testing.assert_allclose(namespace.from_ns(model.weights_), host.weights_, rtol=1e-12)
    # the diagonal and the mean-embedding probe ran where the rows are: rounding apart
    assert model.total_variance_ == pytest.approx(host.total_variance_, rel=RTOL[dtype])


def test_scale_gamma_on_every_namespace(namespace, noisy):
    X, X_new = noisy
    host = ReducedSetKPCA(3, gamma="scale", ell=3.0).fit(X)
    model = ReducedSetKPCA(3, gamma="scale", ell=3.0).fit(namespace.to_ns(X))
    assert model.kernel_.gamma == pytest.approx(host.kernel_.gamma, rel=1e-12)
    assert_same_model(host, model, X_new, namespace, RTOL[np.float64])


@pytest.mark.parametrize("kernel", ["laplacian", "polynomial", "matern"])
def test_other_kernels_on_every_namespace(kernel, namespace, noisy):
    """Kernels with namespace math, and one without (Matern nu = 0.7: its host blocks are moved
    to the rows' namespace), give the numpy model."""
    X, X_new = noisy
    params = dict(kernel=kernel, gamma=0.1, nu=0.7, degree=2, random_state=0)
    params.update(density="kmeans", n_centers=40)
    host = ReducedSetKPCA(3, **params).fit(X)
    model = ReducedSetKPCA(3, **params).fit(namespace.to_ns(X))
    assert_same_model(host, model, X_new, namespace, RTOL[np.float64])
