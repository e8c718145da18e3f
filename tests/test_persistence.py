"""Model files: round trip of every estimator (bit-identical transform), no pickle, corruption."""

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import fastkpca
from fastkpca._model_schema import upgrade_params
from fastkpca._state import register_state_class
from fastkpca.decomposition import _LAZY
from fastkpca.kernels import RBF
from fastkpca.persistence import FORMAT_VERSION, load, model_info, save_model

# Every estimator class fastkpca exposes, plus the random-feature transformers (BaseKPCA too).
# CompressedKPCA has no fit (it is built by compress_expansion); tests/test_compress.py
# round-trips it.
ESTIMATORS = sorted(name for name in _LAZY if name[0].isupper() and name != "CompressedKPCA") + [
    "transformers.RandomFourierFeatures",
    "transformers.OrthogonalRandomFeatures",
    "transformers.FastfoodFeatures",
    "transformers.TensorSketchFeatures",
]


def _class(name):
    import importlib

    module, _, attr = name.rpartition(".")
    try:
        mod = importlib.import_module(f"fastkpca.{module}" if module else "fastkpca.decomposition")
        return getattr(mod, attr)
    except (ImportError, AttributeError):
        pytest.skip(f"{name} is not available yet")


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(0).standard_normal((80, 5))


def _fitted(name, X):
    cls = _class(name)
    params = cls().get_params()
    kwargs = {"random_state": 0}
    if "n_components" in params:
        kwargs["n_components"] = 3
    if "gamma" in params and params.get("kernel") != "polynomial":
        kwargs["gamma"] = 0.3
    return cls(**kwargs).fit(X)


def _assert_same_state(a, b):
    assert type(a) is type(b)
    fa = {k for k in vars(a) if k.endswith("_")}
    fb = {k for k in vars(b) if k.endswith("_")}
    assert fa == fb
    for k in fa:
        va, vb = getattr(a, k), getattr(b, k)
        if isinstance(va, np.ndarray):
            assert va.dtype == vb.dtype and va.shape == vb.shape, k
            np.testing.assert_array_equal(va, vb, err_msg=k)
        else:
            assert type(va) is type(vb), k


@pytest.mark.parametrize("name", ESTIMATORS)
def test_roundtrip_bit_identical(name, X, tmp_path):
    model = _fitted(name, X)
    path = tmp_path / "model.npz"
    model.save(path)
    loaded = fastkpca.load(path)
    _assert_same_state(model, loaded)
    assert repr(loaded.get_params()) == repr(model.get_params())
    for Xt in (X, X[:7] + 0.5, X.astype(np.float32)):
        a, b = model.transform(Xt), loaded.transform(Xt)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)  # bit-identical, not merely close
    # every entry loads with pickle disabled, and no temporary file is left behind
    with np.load(path, allow_pickle=False) as f:
        for key in f.files:
            f[key]
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]


def test_compressed_model_roundtrip(X, tmp_path):
    try:
        from fastkpca import compress_expansion
    except (ImportError, AttributeError):
        pytest.skip("compress_expansion is not available yet")
    exact = _fitted("ExactKPCA", X)
    compressed = compress_expansion(exact, rounding=0.5, projection_dim=3, random_state=0)
    compressed.save(tmp_path / "c.npz")
    loaded = load(tmp_path / "c.npz")
    assert type(loaded).__name__ == type(compressed).__name__
    np.testing.assert_array_equal(loaded.transform(X), compressed.transform(X))


def test_float32_fit_and_array_and_kernel_params(X, tmp_path):
    from fastkpca import ExactKPCA

    model = ExactKPCA(n_components=2, kernel=RBF(0.25), random_state=0).fit(X.astype(np.float32))
    model.save(tmp_path / "m.npz")
    loaded = load(tmp_path / "m.npz")
    assert loaded.kernel == RBF(0.25) and isinstance(loaded.kernel, RBF)
    assert loaded.X_fit_.dtype == np.float32
    np.testing.assert_array_equal(
        loaded.transform(X.astype(np.float32)), model.transform(X.astype(np.float32))
    )


def test_array_constructor_parameter(X, tmp_path):
    cls = _class("NystromKPCA")
    landmarks = X[::4].copy()
    model = cls(n_components=3, landmarks=landmarks, gamma=0.3, random_state=0).fit(X)
    model.save(tmp_path / "ny.npz")
    loaded = load(tmp_path / "ny.npz")
    np.testing.assert_array_equal(loaded.landmarks, landmarks)
    np.testing.assert_array_equal(loaded.transform(X), model.transform(X))


@register_state_class
class _Box:
    """A registered state class for the test (stands in for sketches, feature maps)."""

    def __init__(self, values, label):
        self.values, self.label = values, label

    def to_state(self):
        return {"values": self.values, "label": self.label}

    @classmethod
    def from_state(cls, state):
        return cls(state["values"], state["label"])


class _AnyValue:
    """A declaration that accepts any value (the value-kind tests store values of every kind)."""

    optional = True

    def check(self, value, where, ctx):
        pass


def _allow_attributes(monkeypatch, cls_name, *names):
    """Let model files of ``cls_name`` hold extra fitted attributes of any kind, and the test's
    state class ``_Box`` (value-kind tests)."""
    import dataclasses

    from fastkpca import _model_schema

    schema = _model_schema.FITTED_SCHEMAS[cls_name]
    attributes = {**schema.attributes, **{name: _AnyValue() for name in names}}
    monkeypatch.setitem(
        _model_schema.FITTED_SCHEMAS, cls_name, dataclasses.replace(schema, attributes=attributes)
    )
    box = f"{_Box.__module__}.{_Box.__qualname__}"
    monkeypatch.setitem(
        _model_schema.STATE_SCHEMAS,
        box,
        _model_schema.Schema({"values": _AnyValue(), "label": _AnyValue()}),
    )


def test_value_kinds_roundtrip(X, tmp_path, monkeypatch):
    _allow_attributes(monkeypatch, "ExactKPCA", "extra_", "box_")
    model = _fitted("ExactKPCA", X)
    model.extra_ = {
        "tuple": (1, 2.5, None, "s", True),
        "nan": float("nan"),
        "inf": float("-inf"),
        "np_scalar": np.float32(1.5),
        "np_int": np.int64(7),
        "arrays": [np.arange(3), np.ones((2, 2), dtype=np.float32)],
        "sparse": sp.csr_matrix(np.eye(3)),
        "dtype": np.dtype(np.float32),
    }
    model.box_ = _Box([np.arange(4.0), 3], "hello")
    model.feature_names_in_ = np.array(["a", "b", "c", "d", "e"], dtype=object)
    model.save(tmp_path / "m.npz")
    loaded = load(tmp_path / "m.npz")
    e = loaded.extra_
    assert e["tuple"] == (1, 2.5, None, "s", True)
    assert np.isnan(e["nan"]) and e["inf"] == float("-inf")
    assert type(e["np_scalar"]) is np.float32 and e["np_scalar"] == np.float32(1.5)
    assert type(e["np_int"]) is np.int64
    assert e["arrays"][1].dtype == np.float32
    assert sp.issparse(e["sparse"]) and (e["sparse"] != sp.eye(3)).nnz == 0
    assert e["dtype"] == np.float32
    assert isinstance(loaded.box_, _Box) and loaded.box_.label == "hello"
    np.testing.assert_array_equal(loaded.box_.values[0], np.arange(4.0))
    assert loaded.feature_names_in_.dtype == object
    assert list(loaded.feature_names_in_) == ["a", "b", "c", "d", "e"]


def test_save_refuses_what_it_cannot_store(X, tmp_path, monkeypatch):
    from sklearn.decomposition import PCA

    model = _fitted("ExactKPCA", X)
    model.helper_ = np.ones(2)
    with pytest.raises(ValueError, match="fitted attribute.*helper_ that model files do not list"):
        model.save(tmp_path / "m.npz")
    _allow_attributes(monkeypatch, "ExactKPCA", "helper_")
    model.helper_ = object()
    with pytest.raises(ValueError, match="fitted attribute 'helper_' is a builtins.object"):
        model.save(tmp_path / "m.npz")
    del model.helper_

    class MyRBF(RBF):
        pass

    model.kernel_ = MyRBF(0.3)
    with pytest.raises(ValueError, match="custom kernel"):
        model.save(tmp_path / "m.npz")
    with pytest.raises(ValueError, match="fastkpca estimators"):
        save_model(PCA().fit(X), tmp_path / "p.npz")
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_generator_random_state_is_dropped(X, tmp_path):
    from fastkpca import ExactKPCA

    model = ExactKPCA(n_components=2, gamma=0.3, random_state=np.random.default_rng(1)).fit(X)
    model.save(tmp_path / "m.npz")
    loaded = load(tmp_path / "m.npz")
    assert loaded.random_state is None
    np.testing.assert_array_equal(loaded.transform(X), model.transform(X))


def test_model_info(X, tmp_path):
    model = _fitted("ExactKPCA", X)
    model.save(tmp_path / "m.npz")
    info = model_info(tmp_path / "m.npz")
    assert info["format"] == "fastkpca-model" and info["format_version"] == FORMAT_VERSION
    assert info["fastkpca_version"] == fastkpca.__version__
    assert info["estimator"] == "ExactKPCA" and info["kernel"] == {"kernel": "rbf", "gamma": 0.3}
    assert info["params"]["n_components"] == 3
    assert info["fitted_kinds"]["X_fit_"] == "array float64 (80, 5)"
    np.testing.assert_array_equal(info["eigenvalues"], model.eigenvalues_)


# --- damaged and foreign files --------------------------------------------------------------------


@pytest.fixture
def saved(X, tmp_path):
    path = tmp_path / "m.npz"
    _fitted("ExactKPCA", X).save(path)
    return path


def _rewrite(path, *, meta=None, arrays=None, fix_checksum=True):
    """Rewrite a model file with edited metadata / arrays (a well-formed zip either way)."""
    import hashlib

    with np.load(path, allow_pickle=False) as f:
        contents = {k: f[k] for k in f.files}
    m = json.loads(str(contents["__fastkpca__"][()]))
    if meta:
        meta(m)
    if arrays:
        arrays(contents, m)
    text = json.dumps(m, sort_keys=True)
    contents["__fastkpca__"] = np.array(text)
    if fix_checksum:
        contents["__checksum__"] = np.array(hashlib.sha256(text.encode()).hexdigest())
    with open(path, "wb") as f:
        np.savez(f, **contents)


def test_truncated_file(saved):
    data = saved.read_bytes()
    for keep in (len(data) // 2, len(data) - 30, 100):
        saved.write_bytes(data[:keep])
        with pytest.raises(ValueError, match="damaged or truncated"):
            load(saved)


def test_flipped_byte(saved):
    data = bytearray(saved.read_bytes())
    # the largest member (X_fit_, 80 x 5 float64) sits in the middle of the archive
    data[len(data) // 2] ^= 0xFF
    saved.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="damaged or truncated"):
        load(saved)


def test_tampered_array_with_valid_zip(saved):
    def edit(contents, meta):
        key = meta["fitted"]["eigenvalues_"]["key"]
        contents[key] = contents[key] * 1.0001

    _rewrite(saved, arrays=edit)
    with pytest.raises(ValueError, match="checksum mismatch in array"):
        load(saved)


def test_tampered_metadata(saved):
    _rewrite(saved, meta=lambda m: m["params"].update(gamma=5.0), fix_checksum=False)
    with pytest.raises(ValueError, match="metadata checksum mismatch"):
        load(saved)


def test_unknown_format_version(saved):
    _rewrite(
        saved, meta=lambda m: m.update(format_version=FORMAT_VERSION + 1, fastkpca_version="9.9")
    )
    with pytest.raises(ValueError, match=r"unknown model file format version 2 .*fastkpca 9\.9"):
        load(saved)
    with pytest.raises(ValueError, match="format version"):
        model_info(saved)


@pytest.mark.parametrize(
    "estimator,module",
    [
        ("Popen", "subprocess"),  # an arbitrary import path is never followed
        ("NoSuchKPCA", None),  # not a fastkpca estimator name
        ("np", "fastkpca.decomposition.exact"),  # a fastkpca module, but not a class in it
        ("BaseKPCA", "fastkpca.decomposition._base"),  # not one of the estimator modules
    ],
)
def test_unknown_estimator_class(saved, estimator, module):
    _rewrite(saved, meta=lambda m: m.update(estimator=estimator, module=module))
    with pytest.raises(ValueError, match="unknown estimator class"):
        load(saved)


def test_unknown_state_class(saved, monkeypatch):
    calls = []
    monkeypatch.setattr("os.system", lambda *a: calls.append(a))
    _rewrite(
        saved,
        meta=lambda m: m["fitted"].update(
            kernel_={"kind": "state", "class": "os.system", "state": "echo hi"}
        ),
    )
    with pytest.raises(ValueError, match="unknown class 'os.system'"):
        load(saved)
    assert calls == []


def test_not_a_model_file(tmp_path, X):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ValueError, match="not a fastkpca model file"):
        load(text)
    arr = tmp_path / "a.npy"
    np.save(arr, X)
    with pytest.raises(ValueError, match="not a fastkpca model file"):
        load(arr)
    npz = tmp_path / "plain.npz"
    np.savez(npz, X=X)
    with pytest.raises(ValueError, match="not a fastkpca model file"):
        load(npz)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, __fastkpca__=np.array([{"format": "fastkpca-model"}], dtype=object))
    with pytest.raises(ValueError):
        load(pickled)
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        load(tmp_path / "missing.npz")
    assert zipfile.is_zipfile(npz)


# --- the save whitelist ---------------------------------------------------------------------------


def test_save_accepts_only_the_registered_classes(X, tmp_path):
    """A class must be exactly the one registered under its name, not a subclass or a namesake."""
    from fastkpca.decomposition import SAVEABLE

    cls = _class("ExactKPCA")
    assert SAVEABLE["ExactKPCA"] == cls.__module__ == "fastkpca.decomposition.exact"

    class MyKPCA(cls):
        pass

    with pytest.raises(ValueError, match="MyKPCA is not a fastkpca estimator class"):
        save_model(MyKPCA(n_components=2), tmp_path / "m.npz")
    # same name and module as the registered class, yet another class object
    namesake = type("ExactKPCA", (cls,), {"__module__": cls.__module__})
    with pytest.raises(ValueError, match="ExactKPCA is not a fastkpca estimator class"):
        save_model(namesake(n_components=2), tmp_path / "m.npz")
    with pytest.raises(ValueError, match="can only save fastkpca estimators, got dict"):
        save_model({}, tmp_path / "m.npz")
    assert not list(tmp_path.iterdir())


def _imported_modules(module):
    """Every module ``module``'s source imports, at the top or inside functions (absolute names)."""
    import ast
    import importlib
    import importlib.util

    mod = importlib.import_module(module)
    package = mod.__package__
    names = set()
    for node in ast.walk(ast.parse(open(mod.__file__).read())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_persistence_does_not_import_the_estimator_base():
    """Saveable classes come from the registry in fastkpca.decomposition, not isinstance checks,
    so the model-file format does not depend on the estimators' base class (no import cycle)."""
    imported = _imported_modules("fastkpca.persistence")
    assert "fastkpca.decomposition" in imported
    assert not any(name.startswith("fastkpca.decomposition._base") for name in imported)
    assert "fastkpca.io" not in imported


# --- the fitted-attribute whitelist ---------------------------------------------------------------

_VARIANTS = {
    "RandomFeatureKPCA": [{"solver": "countsketch"}, {"features": "fastfood"}],
    "NystromKPCA": [{"landmarks": "kmeans"}, {"landmarks": "rls"}],
    "ReducedSetKPCA": [{"density": d} for d in ("shadow", "kmeans", "paring", "herding")],
    "SparsifiedKPCA": [{"quantize": True}],
    "StreamingKPCA": [{"features": "orf"}],
}


@pytest.mark.parametrize("name", ESTIMATORS)
def test_fitted_attributes_are_listed(name, X):
    """What ``fit`` sets (in each configuration) is in the model files' whitelist, and the
    whitelist names no member of the class, no parameter and nothing private."""
    from fastkpca._model_schema import FITTED_SCHEMAS
    from fastkpca.persistence import fitted_attribute_names

    cls = _class(name)
    allowed = fitted_attribute_names(cls)
    assert allowed == set(FITTED_SCHEMAS[cls.__name__].attributes)  # the filter removed nothing
    for kwargs in [{}, *_VARIANTS.get(cls.__name__, [])]:
        base = _fitted(name, X).get_params()
        model = cls(**{**base, **kwargs}).fit(X)
        assert {k for k in vars(model) if k.endswith("_")} <= allowed, kwargs
    for n in allowed:
        assert not n.startswith("_") and not hasattr(cls, n) and n not in cls().get_params()


def test_compressed_model_attributes_are_listed(X):
    try:
        from fastkpca import compress_expansion
    except (ImportError, AttributeError):
        pytest.skip("compress_expansion is not available yet")
    from fastkpca.persistence import fitted_attribute_names

    model = compress_expansion(_fitted("ExactKPCA", X), rounding=0.5, projection_dim=3)
    assert {k for k in vars(model) if k.endswith("_")} <= fitted_attribute_names(type(model))


def test_unlisted_class_cannot_be_saved(X, tmp_path, monkeypatch):
    from fastkpca import _model_schema

    monkeypatch.delitem(_model_schema.FITTED_SCHEMAS, "ExactKPCA")
    with pytest.raises(ValueError, match="ExactKPCA has no list of fitted attributes"):
        _fitted("ExactKPCA", X).save(tmp_path / "m.npz")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "name",
    [
        "ExactKPCA",
        "NystromKPCA",
        "RandomFeatureKPCA",
        "StreamingKPCA",
        "ReducedSetKPCA",
        "SparsifiedKPCA",
    ],
)
def test_sklearn_api_attributes_survive_a_round_trip(name, tmp_path):
    """The trace estimate and the pre-image map are fitted attributes the whitelist admits."""
    import fastkpca

    X = np.random.default_rng(0).standard_normal((200, 4))
    model = getattr(fastkpca, name)(3, fit_inverse_transform=True, random_state=0).fit(X)
    model.save(tmp_path / "m.npz")
    loaded = fastkpca.load(tmp_path / "m.npz")
    T = model.transform(X[:20])
    # a round trip through the file holds the same arrays: the same operations on them
    np.testing.assert_array_equal(loaded.transform(X[:20]), T)
    np.testing.assert_array_equal(loaded.inverse_transform(T), model.inverse_transform(T))
    np.testing.assert_array_equal(loaded.explained_variance_ratio_, model.explained_variance_ratio_)


# --- files of earlier releases: the eigensolver's tolerance renamed tol -> eigen_tol ------------
DATA = Path(__file__).parent / "data"
#: Files written by fastkpca 0.1.0 (before the rename), fit on rng(0)'s 60 x 4 rows with gamma
#: 0.3: ExactKPCA(eigen_solver="lanczos", tol=1e-9) and SparsifiedKPCA(sample_prob=0.5,
#: tol=1e-7); ``tol_v0_projections.npz`` holds their projections of 10 new rows.
SOLVER_TOL_FILES = {
    "exact": ("exact_tol_v0.npz", 1e-9),
    "sparsified": ("sparsified_tol_v0.npz", 1e-7),
}


def _solver_tol_name(cls) -> str:
    """The name of the eigensolver's tolerance in this version of ``cls``."""
    return "eigen_tol" if "eigen_tol" in cls().get_params() else "tol"


@pytest.mark.parametrize("which", sorted(SOLVER_TOL_FILES))
def test_files_with_the_solver_tolerance_named_tol_load(which):
    name, value = SOLVER_TOL_FILES[which]
    model = load(DATA / name)
    assert model.get_params()[_solver_tol_name(type(model))] == value
    with np.load(DATA / "tol_v0_projections.npz") as f:
        X_new, expected = f["X_new"], f[which]
    # the same model, the same float64 products: equal to round-off
    np.testing.assert_allclose(model.transform(X_new), expected, rtol=1e-10, atol=1e-12)


def _stand_in(name, params):
    """A class that upgrade_params reads as ``name`` with constructor parameters ``params``."""
    return type(name, (), {"_get_param_names": staticmethod(lambda: list(params))})


def test_upgrade_params_renames_only_files_written_before_the_rename():
    renamed = _stand_in("ExactKPCA", ["eigen_tol", "n_components"])
    # a class whose tol is an error target again, beside eigen_tol
    both = _stand_in("ExactKPCA", ["eigen_tol", "n_components", "tol"])
    before = _stand_in("ExactKPCA", ["n_components", "tol"])
    old_file = {"n_components": 3, "tol": 1e-9}
    assert upgrade_params(renamed, old_file) == {"n_components": 3, "eigen_tol": 1e-9}
    assert upgrade_params(both, old_file) == {"n_components": 3, "eigen_tol": 1e-9}
    # a file written after the rename keeps its names (its tol is the error target)
    new_file = {"eigen_tol": 1e-9, "tol": 0.05}
    assert upgrade_params(both, new_file) == new_file
    # a class that still calls it tol, and other classes, are left as they are
    assert upgrade_params(before, old_file) == old_file
    other = _stand_in("NystromKPCA", ["eigen_tol", "n_components", "tol"])
    assert upgrade_params(other, old_file) == old_file


# --- files of earlier releases: n_features (the random-feature count) and AutoKPCA's memory and
# time renamed (n_random_features / n_components, memory_budget / time_budget) -----------------
#: Files written before the renames, fit on rng(0)'s 60 x 4 rows with gamma 0.3:
#: RandomFeatureKPCA(3, n_features=40) and (n_features="auto", tol=0.5: fitted n_features_ =
#: 256), StreamingKPCA(3, n_features=40, sketch_size=10), AutoKPCA(3, memory="1G", time=600) and
#: RandomFourierFeatures(n_features=16), all random_state=0; ``names_v0_projections.npz`` holds
#: their transforms of the 10 rows after those (``X_new``).
RENAMED_FILES = {
    "random_features": {"n_random_features": 40},
    "random_features_tol": {"n_random_features": "auto", "tol": 0.5},
    "streaming": {"n_random_features": 40, "sketch_size": 10},
    "auto": {"memory_budget": "1G", "time_budget": 600},
    "rff": {"n_components": 16},
}


#: The files whose models compute float32 Fourier features.
FLOAT32_FEATURES = {"random_features", "random_features_tol", "streaming", "rff"}


@pytest.mark.parametrize("which", sorted(RENAMED_FILES))
def test_files_with_the_old_parameter_names_load(which, tmp_path):
    model = load(DATA / f"{which}_names_v0.npz")
    params = model.get_params()
    assert {k: params[k] for k in RENAMED_FILES[which]} == RENAMED_FILES[which]
    assert not {"n_features", "memory", "time"} & set(params)
    if which == "random_features_tol":  # the fitted size, n_features_ in the file
        assert model.n_random_features_ == 256 == model.size_history_[-1][0]
        assert "n_features_" not in vars(model)
    with np.load(DATA / "names_v0_projections.npz") as f:
        X_new, expected = f["X_new"], f[which]
    # Fourier features are computed in float32, whose sin / cos differ between CPUs' SIMD paths
    # by a few units of 6e-8 (tests/test_pinned_models.py): 1e-5 of the largest entry there
    scale = float(np.max(np.abs(expected)))
    atol = 1e-5 * scale if which in FLOAT32_FEATURES else 1e-10 * scale
    np.testing.assert_allclose(model.transform(X_new), expected, rtol=0, atol=atol)
    # saved again, under the new names
    save_model(model, tmp_path / "again.npz")
    assert load(tmp_path / "again.npz").get_params() == params


def test_upgrade_params_renames_the_random_feature_count_and_budgets():
    from fastkpca.transformers import RandomFourierFeatures

    rf, auto = fastkpca.RandomFeatureKPCA, fastkpca.AutoKPCA
    assert upgrade_params(rf, {"n_features": 40}) == {"n_random_features": 40}
    assert upgrade_params(RandomFourierFeatures, {"n_features": 16}) == {"n_components": 16}
    old = {"memory": "1G", "time": 60.0}
    assert upgrade_params(auto, old) == {"memory_budget": "1G", "time_budget": 60.0}
    assert upgrade_params(auto, {"memory_budget": "2G"}) == {"memory_budget": "2G"}
