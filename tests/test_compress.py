"""compress_expansion: randomized rounding (section 4) and random +-1 projections (section 5).

Achlioptas, McSherry & Schoelkopf (2001).  The statistical tests use many independent draws and
compare with quantities computed exactly from the keep probabilities (variance, Hoeffding
bound), so their tolerances are Monte-Carlo standard errors, stated next to each.
"""

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.decomposition import PCA
from sklearn.exceptions import NotFittedError

import fastkpca
from fastkpca import ExactKPCA, ReducedSetKPCA, SparsifiedKPCA, compress_expansion
from fastkpca.datasets import make_random_noisy
from fastkpca.decomposition.compress import (
    CompressedKPCA,
    KernelExpansion,
    centered_expansion,
    kernel_expansion,
    round_coefficients,
)
from fastkpca.execution.arrays import is_array, is_namespace_array, placement_for
from fastkpca.kernels import RBF, Kernel
from tests.conftest import rel_err


def blobs(n, seed=0, d=5):
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(0).standard_normal((3, d)) * 3
    return np.vstack([c + rng.standard_normal((n // 3, d)) for c in centers])


@pytest.fixture(scope="module")
def setting():
    X, Xn = blobs(300), blobs(30, seed=1)
    model = ExactKPCA(3, gamma=0.1, eigen_solver="dense").fit(X)
    return X, Xn, model, model.transform(Xn)


# --- exactness ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rounding", [None, 1.0])
def test_no_compression_is_the_original(setting, rounding):
    X, Xn, model, T = setting
    for source in (model, SparsifiedKPCA(3, gamma=0.1, sample_prob=0.5, random_state=0).fit(X)):
        fast = compress_expansion(source, rounding=rounding, random_state=0)
        # rounding=1 keeps every term with its exact coefficient: only round-off differs.
        np.testing.assert_allclose(
            fast.transform(Xn), source.transform(Xn), rtol=1e-10, atol=1e-10 * np.abs(T).max()
        )
        assert fast.n_terms_ == fast.n_terms_source_ == 300
        assert fast.eigenvalues_ is not source.eigenvalues_
        np.testing.assert_array_equal(fast.eigenvalues_, source.eigenvalues_)


def test_centered_expansion_equals_centered_transform(setting):
    X, Xn, model, T = setting
    exp = kernel_expansion(model)
    assert isinstance(exp, KernelExpansion)
    np.testing.assert_allclose(
        exp.kernel(Xn, exp.points) @ exp.coef + exp.offset, T, rtol=1e-10, atol=1e-10
    )
    # weighted centering folds in the same way (what a reduced-set model needs)
    rng = np.random.default_rng(0)
    Z, A, w = X[:40], rng.standard_normal((40, 2)), rng.uniform(0.5, 1.5, 40)
    w /= w.sum()
    Kz = model.kernel_(Z)
    c, t = w @ Kz, w @ Kz @ w
    Kn = model.kernel_(Xn, Z)
    direct = (Kn - (Kn @ w)[:, None] - c[None, :] + t) @ A
    e = centered_expansion(Z, A, c, t, model.kernel_, weights=w)
    np.testing.assert_allclose(Kn @ e.coef + e.offset, direct, rtol=1e-10, atol=1e-12)


# --- randomized rounding --------------------------------------------------------------------------


def test_rounding_is_the_papers_rule_for_one_component(setting):
    X, _, _, _ = setting
    model = ExactKPCA(1, gamma=0.1, eigen_solver="dense").fit(X)
    coef = kernel_expansion(model).coef[:, 0]
    a = coef / np.linalg.norm(coef)  # the paper's unit vector alpha
    # at 70 % about a third of the coefficients are large enough to be kept deterministically
    keep, new, s, probs = round_coefficients(coef[:, None], 0.7, np.random.default_rng(0))
    np.testing.assert_allclose(probs.sum(), 0.7 * 300, rtol=1e-12)  # E[#terms] = rounding * m
    np.testing.assert_allclose(probs, np.minimum(1.0, s * np.abs(a)), rtol=1e-12)
    big = np.abs(a[keep]) >= 1 / s
    # |alpha_i| >= 1/s: kept as is; otherwise sgn(alpha_i) / s (times the norm we divided by)
    np.testing.assert_allclose(new[big, 0], coef[keep][big], rtol=1e-12)
    np.testing.assert_allclose(
        new[~big, 0] / np.linalg.norm(coef), np.sign(a[keep][~big]) / s, rtol=1e-12
    )
    assert big.any() and (~big).any()


def _draws(model, Xn, n_draws, seed, **kw):
    rng = np.random.default_rng(seed)
    return np.stack(
        [compress_expansion(model, random_state=rng, **kw).transform(Xn) for _ in range(n_draws)]
    )


def test_rounding_is_unbiased_with_the_predicted_variance(setting):
    X, Xn, model, T = setting
    rounding = 0.25
    exp = kernel_expansion(model)
    _, _, _, probs = round_coefficients(exp.coef, rounding, np.random.default_rng(0))
    # Var T~_j(x) = sum_i (1 - pi_i) / pi_i (coef_ij k(x, z_i))^2, exactly.
    Kn = model.kernel_(Xn, exp.points)
    ratio = np.zeros_like(probs)
    ratio[probs > 0] = (1 - probs[probs > 0]) / probs[probs > 0]
    var = (Kn**2 * ratio) @ exp.coef**2
    draws = _draws(model, Xn, 4096, seed=1, rounding=rounding)
    # The mean of R draws has mean squared error var / R (error ~ 1 / sqrt(#draws)): checked for
    # R = 4, 32, 256 on 1024, 128, 16 independent batches.  The ratio below is 1 in expectation;
    # over eight seeds it stayed in 0.98-1.02, 0.89-1.11 and 0.71-1.22 respectively.
    for R in (4, 32, 256):
        batches = draws.reshape(-1, R, *T.shape).mean(axis=1)
        mse = np.mean((batches - T) ** 2, axis=0)
        assert 0.5 < mse.sum() / (var.sum() / R) < 1.6, R
    # and the overall mean is within 4 standard errors of the original, entry by entry
    z = (draws.mean(axis=0) - T) / np.sqrt(var / draws.shape[0])
    assert np.abs(z).max() < 4.5


def test_number_of_terms(setting):
    _, _, model, _ = setting
    counts = [compress_expansion(model, rounding=0.25, random_state=s).n_terms_ for s in range(200)]
    exp = kernel_expansion(model)
    _, _, _, probs = round_coefficients(exp.coef, 0.25, np.random.default_rng(0))
    sd = np.sqrt(np.sum(probs * (1 - probs)))
    # the mean of 200 Poisson-binomial counts is within 4 standard errors of rounding * m = 75
    assert abs(np.mean(counts) - 75) < 4 * sd / np.sqrt(200)
    assert max(counts) < 300


def test_hoeffding_tail_bound(setting):
    """Empirical P(|T~ - T| >= t) against Hoeffding's bound (the paper's eq. 1)."""
    X, Xn, _, _ = setting
    model = ExactKPCA(1, gamma=0.1, eigen_solver="dense").fit(X)
    x = Xn[:1]
    T = model.transform(x)[0, 0]
    rounding = 0.2
    exp = kernel_expansion(model)
    _, _, s, probs = round_coefficients(exp.coef, rounding, np.random.default_rng(0))
    n_draws = 4000
    dev = _draws(model, x, n_draws, seed=3, rounding=rounding)[:, 0, 0] - T
    kx = model.kernel_(x, exp.points)[0]
    rounded = probs < 1
    # Hoeffding with the actual ranges: term i lies in an interval of width |a_i k_i| / pi_i.
    widths2 = np.sum((exp.coef[rounded, 0] * kx[rounded] / probs[rounded]) ** 2)
    # The paper's form: unit-norm alpha, kernel values in [0, 1] (c = 1), m terms rounded:
    # 2 exp(-2 t^2 s^2 / (m c^2)), t measured in units of ||coef||.
    norm = np.linalg.norm(exp.coef)
    m_rounded = int(rounded.sum())
    sd = dev.std()
    for t in (0.5 * sd, sd, 2 * sd, 3 * sd):
        empirical = np.mean(np.abs(dev) >= t)
        hoeffding = 2 * np.exp(-2 * t**2 / widths2)
        paper = 2 * np.exp(-2 * (t / norm) ** 2 * s**2 / m_rounded)
        # + 3 binomial standard errors of the empirical frequency
        slack = 3 * np.sqrt(max(empirical * (1 - empirical), 1 / n_draws) / n_draws)
        assert empirical <= min(1.0, hoeffding) + slack
        assert hoeffding <= paper * (1 + 1e-12)  # the instance bound is the sharper one
    assert np.mean(dev) == pytest.approx(0.0, abs=4 * sd / np.sqrt(n_draws))


# --- random projections --------------------------------------------------------------------------


def test_projection_is_unbiased_for_the_linear_kernel():
    X, Xn = blobs(120, d=30), blobs(15, seed=1, d=30)
    model = ExactKPCA(2, kernel="linear", eigen_solver="dense").fit(X)
    T = model.transform(Xn)
    draws = _draws(model, Xn, 1500, seed=0, projection_dim=5)
    # <xP, zP> is an unbiased estimate of <x, z>, and the linear transform is linear in it; the
    # mean of 1500 draws is within 4.5 standard errors (per-entry spread from the draws) of T.
    z = (draws.mean(axis=0) - T) / (draws.std(axis=0) / np.sqrt(draws.shape[0]))
    assert np.abs(z).max() < 4.5
    assert np.abs(draws[0] - T).max() > 1e-3  # a single draw does differ


def test_projection_error_falls_with_dimension():
    X, Xn = blobs(150, d=60), blobs(30, seed=1, d=60)
    model = ExactKPCA(2, gamma=1 / 120, eigen_solver="dense").fit(X)
    T = model.transform(Xn)
    errs = []
    for q in (4, 16, 64):
        draws = _draws(model, Xn, 20, seed=q, projection_dim=q)
        errs.append(np.mean([np.linalg.norm(D - T) / np.linalg.norm(T) for D in draws]))
    # distance distortion ~ 1 / sqrt(q) (Theorem 6): each 4x step should at least halve it
    # (seen 0.52, 0.25, 0.12)
    assert errs[0] > 1.6 * errs[1] > 1.6**2 * errs[2]
    fast = compress_expansion(model, projection_dim=16, random_state=0)
    assert fast.points_.shape == (150, 16) and fast.projection_.shape == (60, 16)
    assert set(np.unique(np.abs(fast.projection_))) == {0.25}


def test_rounding_and_projection_together(setting):
    X, Xn, model, T = setting
    fast = compress_expansion(model, rounding=0.5, projection_dim=4, random_state=0)
    assert fast.points_.shape[1] == 4 and fast.n_terms_ < 300
    assert np.linalg.norm(fast.transform(Xn) - T) / np.linalg.norm(T) < 1.0


# --- contract: dtype, persistence, determinism, bad input ----------------------------------------


def test_float32_and_determinism(setting):
    X, Xn, model, _ = setting
    a = compress_expansion(model, rounding=0.3, projection_dim=3, random_state=5)
    b = compress_expansion(model, rounding=0.3, projection_dim=3, random_state=5)
    np.testing.assert_array_equal(a.transform(Xn), b.transform(Xn))
    T32 = a.transform(Xn.astype(np.float32))
    assert T32.dtype == np.float32
    np.testing.assert_allclose(T32, a.transform(Xn), rtol=1e-3, atol=1e-4)


def test_fitted_attributes_are_persistable(setting):
    _, _, model, _ = setting
    fast = compress_expansion(model, rounding=0.5, projection_dim=3, random_state=0)
    fitted = {k: v for k, v in vars(fast).items() if k.endswith("_") and not k.startswith("_")}
    assert {"points_", "coef_", "offset_", "projection_", "kernel_", "eigenvalues_"} <= set(fitted)
    for name, value in fitted.items():
        assert isinstance(value, np.ndarray | int | float | str | Kernel | type(None)), name
    assert fast.get_params() == {
        "rounding": 0.5,
        "projection_dim": 3,
        "random_state": 0,
        "n_jobs": None,
        "verbose": 0,
        "device": None,
    }


def test_save_and_load_round_trip(setting, tmp_path):
    io = pytest.importorskip("fastkpca.io")
    if not hasattr(io, "save_model"):
        pytest.skip("fastkpca.io.save_model not available yet")
    import fastkpca

    _, Xn, model, _ = setting
    fast = compress_expansion(model, rounding=0.5, random_state=0)
    fast.save(tmp_path / "m")
    loaded = fastkpca.load(next(tmp_path.iterdir()))
    np.testing.assert_array_equal(loaded.transform(Xn), fast.transform(Xn))


def test_a_model_with_the_protocol_method():
    class Expansion(BaseEstimator):
        """A stand-in for NystromKPCA / ReducedSetKPCA: exposes kernel_expansion()."""

        def fit(self, X):
            from fastkpca.kernels import RBF

            self.kernel_ = RBF(0.5)
            self.n_features_in_ = X.shape[1]
            self.eigenvalues_ = np.array([2.0, 1.0])
            self.points_ = X[:10]
            return self

        def kernel_expansion(self):
            coef = np.arange(20.0).reshape(10, 2)
            return KernelExpansion(self.points_, coef, np.array([1.0, -1.0]), self.kernel_)

    X = blobs(30)
    source = Expansion().fit(X)
    fast = compress_expansion(source, rounding=1.0)
    expected = source.kernel_(X, X[:10]) @ np.arange(20.0).reshape(10, 2) + [1.0, -1.0]
    np.testing.assert_allclose(fast.transform(X), expected, rtol=1e-12)
    assert fast.source_model_ == "Expansion"


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(rounding=0.0), "rounding"),
        (dict(rounding=-0.5), "rounding"),
        (dict(rounding=1.5), "rounding"),
        (dict(rounding=float("nan")), "rounding"),
        (dict(rounding="half"), "rounding"),
        (dict(projection_dim=0), "projection_dim"),
        (dict(projection_dim=2.5), "projection_dim"),
    ],
)
def test_bad_arguments(setting, kw, match):
    _, _, model, _ = setting
    with pytest.raises(ValueError, match=match):
        compress_expansion(model, **kw)


def test_bad_models_and_inputs(setting):
    X, Xn, model, _ = setting
    with pytest.raises(NotFittedError):
        compress_expansion(ExactKPCA())
    with pytest.raises(ValueError, match="expansion-based"):
        compress_expansion(PCA(2).fit(X))
    lap = ExactKPCA(2, kernel="laplacian", eigen_solver="dense").fit(X)
    with pytest.raises(ValueError, match="projection_dim"):
        compress_expansion(lap, projection_dim=3)
    fast = compress_expansion(model, rounding=0.5, random_state=0)
    with pytest.raises(ValueError, match="features"):
        fast.transform(Xn[:, :2])
    with pytest.raises(ValueError, match="compress_expansion"):
        CompressedKPCA().fit(X)
    with pytest.raises(NotFittedError):
        CompressedKPCA().transform(X)


# --- the expansion models over array namespaces --------------------------------------------------
# SparsifiedKPCA, ReducedSetKPCA and compress_expansion on numpy, PyTorch's CPU and
# array_api_strict (CUDA under ``gpu``): the same model as on numpy for the same random_state,
# fitted arrays and outputs of the input's namespace.  Tolerances: float64 1e-10 relative.  Every
# path makes the same random draws on the host generator (sampled pairs, signs, solver start
# vectors, densities, rounding coins, projections) and differs only in the rounding of kernel
# values (a tile's GEMM against the host's chunked distances, ~1e-15 relative), which the
# eigensolvers amplify by at most the inverse relative eigengap of these well separated spectra
# (measured: below 1e-13).  float32 rows give float32 kernel values where the rows are and
# float32 outputs: 2e-4 relative, float32's 6e-8 rounding times the same amplification and the
# square root of the number of terms summed (measured: below 4e-7).

RTOL = {np.float64: 1e-10, np.float32: 2e-4}

#: The two fitted expansion models, as the namespace tests build them.
MODELS = {
    "sparsified": lambda **kw: SparsifiedKPCA(3, gamma=0.1, random_state=0, **kw),
    "reduced_set": lambda **kw: ReducedSetKPCA(3, gamma=0.1, random_state=0, **kw),
}

COMPRESSIONS = {
    "rounding": dict(rounding=0.5),
    "projection": dict(projection_dim=4),
    "both": dict(rounding=0.6, projection_dim=5),
}

#: Every real dtype of the inputs (float16: PyTorch and numpy; array_api_strict has none).
REAL_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "bool", "float16", "float32", "float64"]


def noisy_split():
    """200 training and 60 new rows with a 3-dimensional signal: the namespace tests' data."""
    X = make_random_noisy(260, 6, signal_dim=3, zeta=10, random_state=3)
    return X[:200], X[200:]


@pytest.fixture(scope="module")
def noisy():
    return noisy_split()


def fitted_arrays(model) -> dict:
    """The public fitted arrays (attributes ending in "_"; scipy.sparse matrices are host data
    whatever the namespace, and are left out)."""
    return {
        name: value
        for name, value in vars(model).items()
        if name.endswith("_") and not name.startswith("_") and is_array(value)
    }


def assert_same_model(host, model, X_new, namespace, tol):
    """``model`` (fitted on ``namespace`` rows) transforms rows of that namespace into its
    arrays of X_new's float dtype, equal to ``host``'s (numpy) to ``tol``; its fitted arrays
    are the namespace's, its eigenvalues the host's."""
    Z = model.transform(namespace.to_ns(X_new))
    assert namespace.is_native(Z)
    Z = namespace.from_ns(Z)
    assert Z.dtype == X_new.dtype
    assert rel_err(host.transform(X_new), Z) < tol
    arrays = fitted_arrays(model)
    assert arrays
    for name, value in arrays.items():
        assert namespace.is_native(value), name
    ev = np.asarray(host.eigenvalues_)
    got = namespace.from_ns(model.eigenvalues_)
    np.testing.assert_allclose(got, ev, rtol=tol, atol=tol * np.abs(ev).max())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_kernel_passes_run_where_the_rows_live(name, namespace, noisy, monkeypatch):
    """The passes over all rows (kept Gram entries, diagonal, mean-embedding probe, transform,
    compressed transform) compute the kernel where the rows are: host blocks of the kernel are
    never computed for rows of another namespace (only the m x m Gram of reduced-set centres is
    a host block: the centres are a host density estimate)."""
    if namespace.name == "numpy":
        pytest.skip("host rows compute host blocks")
    X, X_new = noisy
    extra = {"density": "kmeans", "n_centers": 40} if name == "reduced_set" else {}
    model = MODELS[name](**extra)
    calls = []
    host_block = RBF._block

    def spy(self, Xc, Y, ctx, out=None):
        if isinstance(Xc, np.ndarray):
            calls.append(Xc.shape[0])
        return host_block(self, Xc, Y, ctx, out)

    monkeypatch.setattr(RBF, "_block", spy)
    model.fit(namespace.to_ns(X))
    # at most the rows of the centres' own Gram (40), never a pass over the 200 rows
    assert sum(calls) <= getattr(model, "n_centers_", 0)
    fast = compress_expansion(model, rounding=0.5, projection_dim=4, random_state=0)
    calls.clear()
    model.transform(namespace.to_ns(X_new))
    fast.transform(namespace.to_ns(X_new))
    assert not calls


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fit_transform_on_every_namespace(name, namespace, noisy):
    X, _ = noisy
    Z_host = MODELS[name]().fit_transform(X)
    Z = MODELS[name]().fit_transform(namespace.to_ns(X))
    assert namespace.is_native(Z)
    assert rel_err(Z_host, namespace.from_ns(Z)) < RTOL[np.float64]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_device_parameter_computes_there_and_keeps_host_arrays(name, noisy):
    """``device="cpu"`` sends host rows to PyTorch: the model as computed is the cached copy
    there, the fitted arrays follow the numpy data, and transform returns numpy rows."""
    pytest.importorskip("torch")
    X, _ = noisy
    Z_host = MODELS[name]().fit_transform(X)
    model = MODELS[name](device="cpu").fit(X)
    computed = model._placed(placement_for(None, "cpu"))
    assert all(is_namespace_array(v) for v in fitted_arrays(computed).values())
    assert all(isinstance(v, np.ndarray) for v in fitted_arrays(model).values())
    Z = model.transform(X)
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float64
    assert rel_err(Z_host, Z) < RTOL[np.float64]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pre_image_map_on_every_namespace(name, namespace, noisy):
    """``fit_inverse_transform`` on namespace rows: the map is learned (its ridge solve on the
    host) and stored in the namespace, equal to the numpy fit's."""
    X = noisy[0][:120]
    host = MODELS[name](fit_inverse_transform=True).fit(X)
    model = MODELS[name](fit_inverse_transform=True).fit(namespace.to_ns(X))
    for attr in ("dual_coef_inverse_", "X_transformed_fit_"):
        assert namespace.is_native(getattr(model, attr)), attr
    assert rel_err(host.X_transformed_fit_, namespace.from_ns(model.X_transformed_fit_)) < 1e-10
    # the ridge solve amplifies the projections' rounding by cond(K + alpha I) <= 1 + m / alpha
    assert rel_err(host.dual_coef_inverse_, namespace.from_ns(model.dual_coef_inverse_)) < 1e-6
    Z = host.transform(X[:20])
    back = model.inverse_transform(namespace.to_ns(Z))
    assert namespace.is_native(back)
    assert rel_err(host.inverse_transform(Z), namespace.from_ns(back)) < 1e-6
    back32 = namespace.from_ns(model.inverse_transform(namespace.to_ns(Z.astype(np.float32))))
    assert back32.dtype == np.float32
    back_host = model.inverse_transform(Z)  # host rows: the map's host copy, host output
    assert isinstance(back_host, np.ndarray)
    assert rel_err(host.inverse_transform(Z), back_host) < 1e-6
    with pytest.raises(ValueError, match="NaN"):
        model.inverse_transform(namespace.to_ns(np.full((2, 3), np.nan)))
    with pytest.raises(ValueError, match="components"):
        model.inverse_transform(namespace.to_ns(np.zeros((2, 5))))
    back_ns = host.inverse_transform(namespace.to_ns(Z))  # a host model's map on namespace rows
    assert namespace.is_native(back_ns)
    assert rel_err(host.inverse_transform(Z), namespace.from_ns(back_ns)) < 1e-10


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_compress_a_model_of_every_namespace(name, compression, namespace, noisy):
    """The same coins and projection (host generator) as for the numpy model; the compressed
    model lives in the source model's namespace and transforms there."""
    X, X_new = noisy
    host = MODELS[name]().fit(X)
    model = MODELS[name]().fit(namespace.to_ns(X))
    kw = COMPRESSIONS[compression]
    fast_host = compress_expansion(host, random_state=5, **kw)
    fast = compress_expansion(model, random_state=5, **kw)
    assert fast.n_terms_ == fast_host.n_terms_  # the same coins
    assert_same_model(fast_host, fast, X_new, namespace, RTOL[np.float64])
    Z_np = fast.transform(X_new)  # host rows given to the namespace's model give host rows
    assert isinstance(Z_np, np.ndarray)
    assert rel_err(fast_host.transform(X_new), Z_np) < RTOL[np.float64]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_compressed_host_model_transforms_every_namespace(compression, dtype, namespace, noisy):
    """A host compressed model on namespace rows: the host's float32 / float64 arithmetic."""
    X, X_new = noisy
    model = ReducedSetKPCA(3, gamma=0.1, density="kmeans", n_centers=50, random_state=0).fit(X)
    fast = compress_expansion(model, random_state=1, **COMPRESSIONS[compression])
    X_new = X_new.astype(dtype)
    Z = fast.transform(namespace.to_ns(X_new))
    assert namespace.is_native(Z)
    Z = namespace.from_ns(Z)
    assert Z.dtype == dtype
    # float64: products of the same float64 numbers in another order (rounding ~1e-15)
    assert rel_err(fast.transform(X_new), Z) < RTOL[dtype]
    assert isinstance(fast.points_, np.ndarray)  # the host model is left as it was


@pytest.mark.parametrize("name", ["sparsified", "reduced_set", "compressed"])
def test_models_of_every_namespace_save_and_load_on_the_host(name, namespace, noisy, tmp_path):
    X, X_new = noisy
    model = MODELS["reduced_set" if name == "reduced_set" else "sparsified"]()
    model.fit(namespace.to_ns(X))
    if name == "compressed":
        model = compress_expansion(model, rounding=0.5, projection_dim=4, random_state=0)
    path = tmp_path / "model.npz"
    model.save(path)
    loaded = fastkpca.load(path)
    assert type(loaded) is type(model)
    assert all(isinstance(v, np.ndarray) for v in fitted_arrays(loaded).values())
    Z = loaded.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(namespace.from_ns(model.transform(namespace.to_ns(X_new))), Z) < 1e-10


@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("name", ["sparsified", "reduced_set", "compressed"])
def test_every_real_dtype_gives_the_numpy_model(name, dtype, namespace, noisy):
    """Integer, boolean and half-precision rows compute in float64 as numpy's do; float32 in
    float32: the numpy model of the same values, in every namespace."""
    if namespace.name == "array_api_strict" and dtype == "float16":
        pytest.skip("array_api_strict has no float16")
    X, X_new = (np.rint(3 * a) for a in noisy)
    if dtype == "uint8":
        X, X_new = X + 12, X_new + 12
    X, X_new = X.astype(dtype), X_new.astype(dtype)
    work = np.float32 if dtype == "float32" else np.float64

    def fitted(rows):
        model = MODELS["reduced_set" if name == "reduced_set" else "sparsified"]().fit(rows)
        if name == "compressed":
            model = compress_expansion(model, rounding=0.5, projection_dim=4, random_state=0)
        return model

    host = fitted(X.astype(work))
    model = fitted(namespace.to_ns(X))
    Z = model.transform(namespace.to_ns(X_new))
    assert namespace.is_native(Z)
    Z = namespace.from_ns(Z)
    assert Z.dtype == work
    assert rel_err(host.transform(X_new.astype(work)), Z) < RTOL[work]


# --- CUDA (run on a machine with a GPU) ----------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_cuda_equals_cpu_torch(name, dtype, noisy):
    torch = pytest.importorskip("torch")
    X, X_new = (a.astype(dtype) for a in noisy)
    cpu = MODELS[name]().fit(torch.from_numpy(X))
    gpu = MODELS[name]().fit(torch.from_numpy(X).cuda())
    for key, value in fitted_arrays(gpu).items():
        assert value.device.type == "cuda", key
    Z = gpu.transform(torch.from_numpy(X_new).cuda())
    assert Z.device.type == "cuda" and Z.dtype == getattr(torch, np.dtype(dtype).name)
    assert rel_err(cpu.transform(torch.from_numpy(X_new)).numpy(), Z.cpu().numpy()) < RTOL[dtype]
    fast = compress_expansion(gpu, rounding=0.5, projection_dim=4, random_state=0)
    assert fast.points_.device.type == "cuda"
    Zf = fast.transform(torch.from_numpy(X_new).cuda())
    fast_cpu = compress_expansion(cpu, rounding=0.5, projection_dim=4, random_state=0)
    Zf_cpu = fast_cpu.transform(torch.from_numpy(X_new))
    assert rel_err(Zf_cpu.numpy(), Zf.cpu().numpy()) < RTOL[dtype]


@pytest.mark.gpu
def test_cuda_device_parameter_and_host_model_on_cuda(noisy):
    torch = pytest.importorskip("torch")
    X, X_new = noisy
    params = dict(gamma=0.1, density="kmeans", n_centers=40, random_state=0)
    host = ReducedSetKPCA(3, **params).fit(X)
    dev = ReducedSetKPCA(3, device="cuda", **params).fit(X)
    # computed on the GPU (the cached copy there); the fitted arrays follow the numpy data
    assert dev._placed(placement_for(None, "cuda")).centers_.device.type == "cuda"
    assert isinstance(dev.centers_, np.ndarray)
    Z = dev.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(host.transform(X_new), Z) < RTOL[np.float64]
    fast = compress_expansion(host, rounding=0.5, random_state=0)
    Zc = fast.transform(torch.from_numpy(X_new).cuda())
    assert Zc.device.type == "cuda"
    assert rel_err(fast.transform(X_new), Zc.cpu().numpy()) < 1e-10


def test_a_dual_expansion_without_the_protocol_method(setting):
    """fastkpca.KernelPCA holds the same dual expansion over its training rows as ExactKPCA:
    compressed without rounding it is the same transform; a precomputed one is refused."""
    X, Xn, _, _ = setting
    model = fastkpca.KernelPCA(3, kernel="rbf", gamma=0.1, eigen_solver="dense").fit(X)
    fast = compress_expansion(model, rounding=1.0)
    T = model.transform(Xn)
    np.testing.assert_allclose(fast.transform(Xn), T, rtol=1e-10, atol=1e-10 * np.abs(T).max())
    assert fast.source_model_ == "KernelPCA"
    pre = fastkpca.KernelPCA(3, kernel="precomputed").fit(model.kernel_(X))
    with pytest.raises(ValueError, match="precomputed"):
        compress_expansion(pre, rounding=0.5)
