"""Model files from untrusted hands: every edit is refused at load, naming the file and what.

A forger can recompute a model file's checksums, so the integrity check alone lets edited arrays
and metadata through.  These tests take real fitted files of every saveable class, generate
hostile variants of each (wrong shapes, dtypes, NaN / inf, missing / extra / inconsistent
attributes, swapped classes, invalid kernels, parameters and states, negative or huge integers)
with the checksums recomputed, and check that each one is refused with a ValueError that names
the file and the attribute (or parameter); the unedited files still load with an identical
transform.  Then the archive itself (encryption, compression methods, zip bombs, many members,
nested or duplicated names), malformed metadata for ``fastkpca info``, ``is_model_file`` and
``atomic_output`` on interruption.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import struct
import warnings
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

import fastkpca
from fastkpca import persistence
from fastkpca._model_schema import FITTED_SCHEMAS, STATE_SCHEMAS, Array, Int, OneOf, Real
from fastkpca.decomposition import SAVEABLE
from fastkpca.persistence import (
    _array_digest,
    atomic_output,
    is_model_file,
    load,
    model_info,
    save_model,
)
from tests.conftest import least_traced_peak

# --- real fitted files of every class -------------------------------------------------------


def _models():
    """label -> (fitted model, rows to transform): every saveable class, in the configurations
    whose fitted state differs (sparse training rows, the pre-image map, each feature map,
    each Nystrom solver path, size by tolerance, compressed expansions)."""
    from fastkpca import transformers

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    Xs = X.copy()
    Xs[np.abs(Xs) < 0.6] = 0.0
    Xs = sp.csr_matrix(Xs)
    d = fastkpca
    exact = d.ExactKPCA(2, gamma=0.3, random_state=0).fit(X)
    models = {
        "exact": (exact, X),
        "exact_csr_inverse": (d.ExactKPCA(2, gamma=0.3, random_state=0).fit(Xs), Xs),
        "exact_inverse": (d.ExactKPCA(2, gamma=0.3, fit_inverse_transform=True).fit(X), X),
        "kernel_pca": (
            d.KernelPCA(2, kernel="rbf", gamma=0.3, fit_inverse_transform=True).fit(X),
            X,
        ),
        "nystrom": (d.NystromKPCA(2, n_landmarks=10, solver="exact", random_state=0).fit(X), X),
        "nystrom_sketch": (
            d.NystromKPCA(2, n_landmarks=20, solver="randomized", random_state=0).fit(X),
            X,
        ),
        "nystrom_exact_path": (d.NystromKPCA(2, gamma=0.3, random_state=0).fit(X), X),
        "rf_orf": (d.RandomFeatureKPCA(2, n_random_features=16, random_state=0).fit(X), X),
        "rf_fastfood_inverse": (
            d.RandomFeatureKPCA(
                2,
                n_random_features=16,
                features="fastfood",
                fit_inverse_transform=True,
                random_state=0,
            ).fit(X),
            X,
        ),
        "rf_tensorsketch": (
            d.RandomFeatureKPCA(
                2,
                n_random_features=16,
                kernel="polynomial",
                features="tensorsketch",
                random_state=0,
            ).fit(X),
            X,
        ),
        "rf_countsketch_tol": (
            d.RandomFeatureKPCA(2, n_random_features="auto", tol=0.5, random_state=0).fit(X),
            X,
        ),
        "streaming": (
            d.StreamingKPCA(
                2, n_random_features=16, sketch_size=6, features="rff", random_state=0
            ).fit(X),
            X,
        ),
        "reduced_set": (
            d.ReducedSetKPCA(2, density="kmeans", n_centers=10, random_state=0).fit(X),
            X,
        ),
        "reduced_set_shadow": (d.ReducedSetKPCA(2, gamma=0.3, random_state=0).fit(X), X),
        "sparsified": (d.SparsifiedKPCA(2, sample_prob=0.5, random_state=0).fit(X), X),
        "compressed": (
            d.compress_expansion(exact, rounding=0.5, projection_dim=3, random_state=0),
            X,
        ),
        "compressed_plain": (d.compress_expansion(exact), X),
        "rff": (transformers.RandomFourierFeatures(16, gamma=0.3, random_state=0).fit(X), X),
        "orf": (transformers.OrthogonalRandomFeatures(16, gamma=0.3, random_state=0).fit(X), X),
        "fastfood": (transformers.FastfoodFeatures(16, gamma=0.3, random_state=0).fit(X), X),
        "tensorsketch": (transformers.TensorSketchFeatures(16, random_state=0).fit(X), X),
    }
    models["auto"] = (d.AutoKPCA(2, gamma=0.3, random_state=0).fit(X), X)
    models["exact_named"] = (d.ExactKPCA(2, gamma=0.3).fit(X), X)
    models["exact_named"][0].feature_names_in_ = np.array(["a", "b", "c", "d"], dtype=object)
    return models


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """label -> (path, model, rows) of real model files."""
    folder = tmp_path_factory.mktemp("models")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, (model, X) in _models().items():
            path = folder / f"{label}.npz"
            model.save(path)
            out[label] = (path, model, X)
    return out


def test_every_saveable_class_is_covered(saved_models):
    classes = {type(model).__name__ for _, model, _ in saved_models.values()}
    assert classes == set(SAVEABLE)


def _read(path):
    """(metadata, arrays by key) of a model file, read as plain npz (trusted: our own files)."""
    with np.load(path, allow_pickle=False) as f:
        contents = {k: f[k] for k in f.files}
    meta = json.loads(str(contents.pop("__fastkpca__")[()]))
    contents.pop("__checksum__")
    return meta, contents


def _digest(a):
    try:
        return _array_digest(a)
    except (TypeError, ValueError):
        return "0" * 64  # an object array: refused before its digest matters


def _referenced(node, keys):
    """The array keys a metadata tree refers to."""
    if isinstance(node, dict):
        if node.get("kind") in ("array", "scalar"):
            keys.add(node.get("key"))
        if node.get("kind") == "sparse":
            keys.update(node.get(k) for k in ("data", "indices", "indptr"))
        for value in node.values():
            _referenced(value, keys)
    elif isinstance(node, list):
        for value in node:
            _referenced(value, keys)
    return keys


def _write(path, meta, arrays):
    """A model file of ``meta`` and ``arrays`` with every checksum recomputed (a forger's file):
    the array table is rebuilt from the arrays the metadata uses, the metadata checksum from
    the metadata."""
    meta = copy.deepcopy(meta)
    used = _referenced([meta.get("params"), meta.get("fitted")], set())
    arrays = {key: a for key, a in arrays.items() if key in used}
    meta["arrays"] = {
        key: {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": _digest(a)}
        for key, a in arrays.items()
    }
    text = json.dumps(meta, sort_keys=True)
    contents = dict(arrays)
    contents["__fastkpca__"] = np.array(text)
    contents["__checksum__"] = np.array(hashlib.sha256(text.encode()).hexdigest())
    with open(path, "wb") as f:
        np.savez(f, **contents)


# --- the hostile variants -------------------------------------------------------------------


def _new_key(arrays):
    return f"a{max(int(k[1:]) for k in arrays) + 1 if arrays else 0}"


def _set_array(arrays, key, value):
    arrays[key] = value


def _free_dims(schema):
    """Dimension names that only one array of ``schema`` uses and no integer attribute fixes:
    such an array may legitimately hold more rows (a sketch's buffer of filled rows)."""
    uses: dict = {}
    for attr, spec in schema.attributes.items():
        for dim in getattr(spec, "shape", ()):
            uses.setdefault(dim, set()).add(attr)
    return {dim for dim, attrs in uses.items() if len(attrs) == 1 and dim not in schema.attributes}


def _array_variants(key, a, spec, schema):
    """Edits of the array ``arrays[key]`` that its declaration ``spec`` refuses."""
    out = []
    if a.ndim >= 1 and spec.shape[0] not in _free_dims(schema):
        grown = np.concatenate([a, a[:1] if a.shape[0] else np.zeros((1,) + a.shape[1:], a.dtype)])
        out.append(("one more row", grown))
    if a.ndim == 2 and a.shape[1] > 1:
        out.append(("one column less", a[:, :-1]))
    out.append(("one more dimension", a[..., None]))
    if a.dtype.kind == "f":
        for dtype in (np.complex128, np.bool_, np.int64, np.float16):
            out.append((f"dtype {np.dtype(dtype)}", a.astype(dtype)))
        out.append(("strings", a.astype(str)))
        out.append(("objects", a.astype(object)))
        if a.size and spec.finite:
            bad = a.copy()
            bad.flat[-1] = np.nan
            out.append(("NaN", bad))
            if spec.finite is True:
                bad = a.copy()
                bad.flat[0] = np.inf
                out.append(("inf", bad))
    elif a.dtype.kind in "iu":
        out.append(("dtype float64", a.astype(np.float64)))
        if a.size:
            bad = a.copy()
            bad.flat[0] = -1
            out.append(("a negative entry", bad))
            bad = a.copy()
            bad.flat[0] = 2**40
            out.append(("a huge entry", bad))
    elif a.dtype.kind == "U":
        out.append(("dtype float64", np.zeros(a.shape)))
    return [(what, lambda m, arr, v=v: _set_array(arr, key, v)) for what, v in out]


def _scalar_variants(value, spec):
    """JSON values that the declaration ``spec`` of a scalar refuses."""
    bad = ["3x", [1], {"kind": "nonsense"}, True]
    if isinstance(spec, Int):
        bad += [None, 2.5, spec.low - 1, 2**70]
    elif isinstance(spec, Real):
        if not spec.none:
            bad.append(None)
        if not spec.nan:
            bad.append({"kind": "float", "value": "nan"})
        if not spec.inf:
            bad.append({"kind": "float", "value": "inf"})
        if spec.low is not None:
            bad.append(spec.low - 1.0)
    elif isinstance(spec, OneOf):
        bad += [None, 3, "bogus"]
    elif isinstance(spec, Array):
        bad += [None] if not spec.none else []
        bad += [3, "x"]
    else:
        bad += [None, 3]
    return bad


#: Integer attributes that are dimensions of arrays: one more is inconsistent with them.
_DIMENSIONS = {
    "n_components_",
    "n_features_in_",
    "n_landmarks_",
    "n_output_features_",
    "n_centers_",
    "n_terms_",
    "n_input_features",
    "n_frequencies",
    "n_columns",
    "n_buckets",
    "degree",
}


def _node_variants(node, spec, arrays, where, name, schema):
    """(description, edit) pairs for one value tree ``node``, the value of ``name`` declared by
    ``spec``; ``where(meta)`` locates it: its parent and key."""

    def replace(new):
        def edit(m, arr):
            parent, key = where(m)
            parent[key] = copy.deepcopy(new)

        return edit

    out = [(f"value {json.dumps(v)}", replace(v)) for v in _scalar_variants(node, spec)]
    if isinstance(node, int) and not isinstance(node, bool) and name in _DIMENSIONS:
        out.append(("one more", replace(node + 1)))
    if not isinstance(node, dict):
        return out
    kind = node["kind"]
    if kind == "array":
        out += _array_variants(node["key"], arrays[node["key"]], spec, schema)
        out.append(("a missing array", replace({"kind": "array", "key": "a999"})))
    elif kind == "sparse":
        key = node["indices"]

        def bad_index(m, arr, key=key):
            arr[key] = arr[key].copy()
            arr[key][0] = 10**6

        out.append(("a column index out of range", bad_index))
        out.append(("indices as floats", lambda m, arr, k=key: _set_array(arr, k, arr[k] * 1.0)))
        data = node["data"]

        def nan_data(m, arr, key=data):
            arr[key] = arr[key].copy()
            arr[key][0] = np.nan

        out.append(("NaN data", nan_data))
        grown = copy.deepcopy(node)
        grown["shape"][0] += 1
        out.append(("one more row", replace(grown)))
    elif kind == "kernel":
        items = node["config"]["items"]
        for what, new in [
            ("an unknown kernel", {**items, "kernel": "nope"}),
            ("an unknown parameter", {**items, "bogus": 1.0}),
            ("no kernel name", {k: v for k, v in items.items() if k != "kernel"}),
        ] + ([("a negative gamma", {**items, "gamma": -1.0})] if "gamma" in items else []):
            out.append(
                (what, replace({"kind": "kernel", "config": {"kind": "dict", "items": new}}))
            )
        out.append(("a list config", replace({"kind": "kernel", "config": [1, 2]})))
        out.append(("a state instead", replace({"kind": "state", "class": "x", "state": None})))
    elif kind == "state":
        name = node["class"]
        for other in STATE_SCHEMAS:
            if other != name:
                out.append((f"claims {other}", replace({**node, "class": other})))
        out.append(("an unregistered class", replace({**node, "class": "os.system"})))
        schema = STATE_SCHEMAS[name]
        items = node["state"]["items"]
        for item, item_node in items.items():
            item_spec = schema.attributes[item]

            def item_where(m, item=item, outer=where):
                parent, key = outer(m)
                return parent[key]["state"]["items"], item

            for what, edit in _node_variants(
                item_node, item_spec, arrays, item_where, item, schema
            ):
                out.append((f"state {item!r}: {what}", edit))
            if not item_spec.optional:

                def drop(m, arr, item=item, outer=where):
                    parent, key = outer(m)
                    del parent[key]["state"]["items"][item]

                out.append((f"state {item!r} missing", drop))
    elif kind in ("list", "tuple") and node["items"]:

        def first_size_negative(m, arr):
            parent, key = where(m)
            parent[key]["items"][0]["items"][0] = -1

        out.append(("a negative size", first_size_negative))
    return out


def _variants(meta, arrays):
    """(description, name the error must contain, edit(meta, arrays)) for one model file."""
    cls_name = meta["estimator"]
    schema = FITTED_SCHEMAS[cls_name]
    out = []
    for name, node in meta["fitted"].items():

        def where(m, name=name):
            return m["fitted"], name

        for what, edit in _node_variants(
            node, schema.attributes[name], arrays, where, name, schema
        ):
            out.append((f"{name}: {what}", name, edit))
        if not schema.attributes[name].optional:
            out.append((f"{name} missing", name, lambda m, arr, name=name: m["fitted"].pop(name)))
    out.append(("an undeclared attribute", "bogus_", lambda m, arr: m["fitted"].update(bogus_=1)))
    out.append(("a private attribute", "_secret", lambda m, arr: m["fitted"].update(_secret=1)))
    for other in SAVEABLE:
        if other != cls_name:

            def swap(m, arr, other=other):
                m.update(estimator=other, module=SAVEABLE[other])

            out.append((f"claims to be {other}", other, swap))
    params = meta["params"]
    out.append(("an unknown parameter", "bogus", lambda m, arr: m["params"].update(bogus=1)))
    bad_params = {
        "n_components": [-1, "x", 0],
        "kernel": ["nope", 3],
        "gamma": [-1.0, "huge"],
        "random_state": ["seed", -5],
        "degree": [0],
        "nu": [-1.0],
        # checked by fit before it reads any row (check_params runs fit that far)
        "eigen_solver": ["bogus"],
        "solver": ["bogus"],
        "landmarks": ["bogus"],
        "n_landmarks": [-1],
        "covariance": ["bogus"],
        "sketch_size": [0],
        "n_passes": [3],
        "density": ["bogus"],
        "sample_prob": [2.0],
    }
    for name, values in bad_params.items():
        if name not in params or (name in ("degree", "nu") and not _uses(meta, name)):
            continue
        for value in values:

            def set_param(m, arr, name=name, value=value):
                m["params"][name] = value

            out.append((f"parameter {name}={value!r}", name, set_param))
    return out


def _uses(meta, name):
    """Whether the model's kernel reads parameter ``name`` (degree: polynomial, nu: matern)."""
    kernel = meta["params"].get("kernel")
    return {"degree": "polynomial", "nu": "matern"}[name] == kernel


def _hostile_files(saved_models, tmp_path, labels):
    for label in labels:
        path, model, X = saved_models[label]
        meta, arrays = _read(path)
        for what, name, edit in _variants(meta, arrays):
            m, arr = copy.deepcopy(meta), {k: v.copy() for k, v in arrays.items()}
            edit(m, arr)
            out = tmp_path / f"{label}.npz"
            _write(out, m, arr)
            yield f"{label}: {what}", name, out


def _check_refused(description, name, path):
    try:
        model = load(path)
    except ValueError as exc:
        message = str(exc)
        assert str(path) in message, (description, message)
        assert name in message, (description, message)
        return
    raise AssertionError(f"{description}: loaded a {type(model).__name__}")


_FAST = ["exact_named", "nystrom", "streaming", "compressed", "tensorsketch", "rf_fastfood_inverse"]


@pytest.mark.parametrize("label", _FAST)
def test_hostile_variants_are_refused_naming_the_attribute(saved_models, tmp_path, label):
    n = 0
    for description, name, path in _hostile_files(saved_models, tmp_path, [label]):
        _check_refused(description, name, path)
        n += 1
    assert n > 50


@pytest.mark.slow
def test_hostile_variants_of_every_file_are_refused(saved_models, tmp_path):
    labels = sorted(set(saved_models) - set(_FAST))
    for description, name, path in _hostile_files(saved_models, tmp_path, labels):
        _check_refused(description, name, path)


def test_unedited_files_load_with_an_identical_transform(saved_models, tmp_path):
    for path, model, X in saved_models.values():
        meta, arrays = _read(path)
        rewritten = tmp_path / "same.npz"
        _write(rewritten, meta, arrays)  # the forger's writer changes nothing by itself
        for p in (path, rewritten):
            loaded = load(p)
            assert type(loaded) is type(model)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # X without the feature names of exact_named
                np.testing.assert_array_equal(loaded.transform(X[:5]), model.transform(X[:5]))


# --- the archive ----------------------------------------------------------------------------


@pytest.fixture
def model_file(saved_models):
    return saved_models["exact"][0]


def _copy_archive(src, dst, *, edit=None, extra=()):
    """Rewrite the zip ``src`` as ``dst`` member by member: ``edit(info, data)`` may return a
    new (ZipInfo, bytes) or None to drop the member; ``extra`` adds (name, bytes) members."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            item = (info, data) if edit is None else edit(info, data)
            if item is not None:
                zout.writestr(*item)
        for name, data in extra:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # zipfile warns of a duplicate name
                zout.writestr(name, data)


def _patch_headers(path, offset_local, offset_central, fmt, value):
    """Overwrite a field of every local header and central directory record of a zip file."""
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", offset_local), (b"PK\x01\x02", offset_central)):
        pos = data.find(signature)
        while pos >= 0:
            struct.pack_into(fmt, data, pos + offset, value)
            pos = data.find(signature, pos + 4)
    path.write_bytes(bytes(data))


def test_encrypted_member_is_a_value_error(model_file, tmp_path):
    out = tmp_path / "encrypted.npz"
    _copy_archive(model_file, out)
    _patch_headers(out, 6, 8, "<H", 0x1)  # general purpose flag bit 0: encrypted
    with pytest.raises(ValueError, match=f"{out}.*is encrypted"):
        load(out)
    assert not is_model_file(out)


@pytest.mark.parametrize("method", [99, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_unknown_or_foreign_compression_is_a_value_error(model_file, tmp_path, method):
    out = tmp_path / "method.npz"
    _copy_archive(model_file, out)
    _patch_headers(out, 8, 10, "<H", method)
    with pytest.raises(ValueError, match=f"{out}.*compression method {method}"):
        load(out)
    assert not is_model_file(out)


def test_nested_member_path_is_refused(model_file, tmp_path):
    out = tmp_path / "nested.npz"
    _copy_archive(model_file, out, extra=[("../outside.npy", b"x")])
    with pytest.raises(ValueError, match=r"member '\.\./outside\.npy' is not a plain array name"):
        load(out)
    _copy_archive(model_file, out, extra=[("sub/a0.npy", b"x")])
    with pytest.raises(ValueError, match="member 'sub/a0.npy' is not a plain array name"):
        load(out)


def test_duplicated_member_name_is_refused(model_file, tmp_path):
    out = tmp_path / "twice.npz"
    meta, arrays = _read(model_file)
    key = meta["fitted"]["eigenvalues_"]["key"]
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, arrays[key] * 2)  # a second, different eigenvalues_
    _copy_archive(model_file, out, extra=[(f"{key}.npy", buffer.getvalue())])
    with pytest.raises(ValueError, match=f"member '{key}.npy' appears twice"):
        load(out)


def test_too_many_members_is_refused(model_file, tmp_path):
    out = tmp_path / "many.npz"
    _copy_archive(model_file, out, extra=[(f"b{i}.npy", b"") for i in range(5000)])
    with pytest.raises(ValueError, match="5\\d{3} members, more than a model file has"):
        load(out)


def test_huge_zip_directory_is_refused_before_it_is_parsed(model_file, tmp_path):
    out = tmp_path / "directory.npz"
    data = bytearray(model_file.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<L", data, end + 12, 2**31)  # the directory's declared size
    out.write_bytes(bytes(data))

    def refuse():
        with pytest.raises(ValueError, match="zip directory is 2147483648 bytes"):
            load(out)
        assert not is_model_file(out)

    assert least_traced_peak(refuse) < 2**20


def _deflated_bomb(model_file, out, *, declared):
    """``model_file`` with X_fit_'s member followed, inside its deflate stream, by 64 MiB of
    zeros; the zip headers declare ``declared`` uncompressed bytes for it."""
    meta, _ = _read(model_file)
    name = meta["fitted"]["X_fit_"]["key"] + ".npy"

    def edit(info, data):
        if info.filename != name:
            return info, data
        bomb = zipfile.ZipInfo(name)
        bomb.compress_type = zipfile.ZIP_DEFLATED
        return bomb, data + bytes(64 * 2**20)

    _copy_archive(model_file, out, edit=edit)
    raw = bytearray(out.read_bytes())
    with zipfile.ZipFile(out) as zf:
        info = zf.getinfo(name)
    # the local header's and the directory's uncompressed size fields
    struct.pack_into("<L", raw, info.header_offset + 22, declared)
    central = raw.rfind(b"PK\x01\x02", 0, raw.rfind(b"PK\x05\x06"))
    while central >= 0:
        (length,) = struct.unpack_from("<H", raw, central + 28)
        if raw[central + 46 : central + 46 + length].decode() == name:
            struct.pack_into("<L", raw, central + 24, declared)
            break
        central = raw.rfind(b"PK\x01\x02", 0, central)
    out.write_bytes(bytes(raw))
    return len(data_of(model_file, name))


def data_of(path, name):
    with zipfile.ZipFile(path) as zf:
        return zf.read(name)


@pytest.mark.parametrize("declared", ["true size", "huge"])
def test_deflate_bomb_costs_what_the_file_declares(model_file, tmp_path, declared):
    """A member that expands far beyond its declared size is read only up to that size (then
    its CRC fails); one that declares a huge size is refused from the directory alone."""
    out = tmp_path / "bomb.npz"
    meta, _ = _read(model_file)
    name = meta["fitted"]["X_fit_"]["key"] + ".npy"
    size = len(data_of(model_file, name))
    _deflated_bomb(model_file, out, declared=size if declared == "true size" else 2**32 - 1)
    assert out.stat().st_size < 200_000

    def refuse():
        with pytest.raises(ValueError, match=f"{out}"):
            load(out)

    assert least_traced_peak(refuse) < 4 * 2**20


# --- malformed metadata: ``fastkpca info`` and load -----------------------------------------


def _write_text(path, text, arrays):
    """A model file whose metadata is ``text`` verbatim (its checksum recomputed)."""
    contents = dict(arrays)
    contents["__fastkpca__"] = np.array(text)
    contents["__checksum__"] = np.array(hashlib.sha256(text.encode()).hexdigest())
    with open(path, "wb") as f:
        np.savez(f, **contents)


def _nested(depth):
    node = 1
    for _ in range(depth):
        node = {"kind": "list", "items": [node]}
    return node


_MALFORMED = {
    "params a list": (lambda m: m.update(params=[]), "'params' is a list"),
    "fitted a string": (lambda m: m.update(fitted="x"), "'fitted' is a string"),
    "estimator a number": (lambda m: m.update(estimator=5), "'estimator' is a number"),
    "version a string": (lambda m: m.update(format_version="1"), "format version '1'"),
    "fastkpca_version a list": (lambda m: m.update(fastkpca_version=[1]), "'fastkpca_version'"),
    "no fitted": (lambda m: m.pop("fitted"), "the key 'fitted' is missing"),
    "no params": (lambda m: m.pop("params"), "the key 'params' is missing"),
    "no estimator": (lambda m: m.pop("estimator"), "the key 'estimator' is missing"),
    "unknown key": (lambda m: m.update(extra={}), "unknown key 'extra'"),
    "arrays a list": (lambda m: m.update(arrays=[]), "'arrays' is a list"),
    "fitted_kinds a list": (lambda m: m.update(fitted_kinds=[]), "'fitted_kinds' is a list"),
    "a fitted kind a number": (
        lambda m: m["fitted_kinds"].update(X_fit_=3),
        "'fitted_kinds' 'X_fit_' is a number",
    ),
    "kernel a list": (lambda m: m.update(kernel=[]), "'kernel' is a list"),
    "kernel value a list": (lambda m: m["kernel"].update(gamma=[1]), "'kernel' key 'gamma'"),
    "data a list": (lambda m: m.update(data=[]), "'data' is a list"),
    "data columns a string": (lambda m: m.update(data={"columns": "abc"}), "'data' key 'columns'"),
    "libsvm base 2": (
        lambda m: m.update(data={"libsvm_index_base": 2}),
        "'data' key 'libsvm_index_base'",
    ),
    "libsvm base a string": (
        lambda m: m.update(data={"libsvm_index_base": "1"}),
        "'data' key 'libsvm_index_base'",
    ),
    "unknown data key": (lambda m: m.update(data={"rows": 3}), "'data' has an unknown key 'rows'"),
    "deep value tree": (
        lambda m: m["fitted"].update(n_iter_=_nested(200)),
        "fitted attribute 'n_iter_'.* nested more than 32 levels",
    ),
    "huge version string": (
        lambda m: m.update(fastkpca_version="9" * 10**6),
        "'fastkpca_version' is a string of 1000000 characters",
    ),
    "huge string value": (
        lambda m: m["params"].update(kernel="r" * 10**5),
        "parameter 'kernel' is a string of 100000 characters",
    ),
    "huge attribute name": (
        lambda m: m["fitted"].update({"x" * 10**5: 1}),
        "fitted attribute name is a string of 100000",
    ),
    "a bare list value": (lambda m: m["params"].update(gamma=[0.3]), "parameter 'gamma' is a list"),
    "value kind a number": (
        lambda m: m["params"].update(gamma={"kind": 3}),
        "parameter 'gamma' has an unknown value kind 3",
    ),
    "array node without key": (
        lambda m: m["fitted"]["X_fit_"].pop("key"),
        "fitted attribute 'X_fit_': a array value lacks its field 'key'",
    ),
    "array key a number": (
        lambda m: m["fitted"]["X_fit_"].update(key=0),
        "fitted attribute 'X_fit_'.key names 0",
    ),
    "sparse shape a string": (
        lambda m: m["fitted"].update(
            X_fit_={
                "kind": "sparse",
                "format": "csr",
                "shape": "big",
                "array": False,
                "data": "a0",
                "indices": "a0",
                "indptr": "a0",
            }
        ),
        "fitted attribute 'X_fit_'.shape is not a shape",
    ),
    "state class a list": (
        lambda m: m["fitted"].update(kernel_={"kind": "state", "class": [], "state": None}),
        "fitted attribute 'kernel_'.class is \\[\\], not a class name",
    ),
    "dtype value weird": (
        lambda m: m["params"].update(tol={"kind": "dtype", "value": "O"}),
        "parameter 'tol'.value is 'O', not a numeric dtype",
    ),
}


@pytest.mark.parametrize("case", sorted(_MALFORMED))
def test_malformed_metadata_is_one_value_error(model_file, tmp_path, capsys, case):
    from fastkpca.cli import main

    edit, message = _MALFORMED[case]
    meta, arrays = _read(model_file)
    edit(meta)
    out = tmp_path / "malformed.npz"
    if isinstance(meta.get("arrays"), dict) and isinstance(meta.get("fitted"), dict):
        _write(out, meta, arrays)
    else:
        _write_text(out, json.dumps(meta, sort_keys=True), arrays)
    for reader in (model_info, load):
        with pytest.raises(ValueError, match=f"^{out}: .*{message}"):
            reader(out)
    assert main(["info", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fastkpca: error: "), err


def test_metadata_nested_beyond_the_json_parser(model_file, tmp_path):
    meta, arrays = _read(model_file)
    text = json.dumps(meta, sort_keys=True)
    deep = '{"kind": "list", "items": [' * 100_000 + "1" + "]}" * 100_000
    text = text.replace('"n_iter_": 1', f'"n_iter_": {deep}', 1)
    out = tmp_path / "deep.npz"
    _write_text(out, text, arrays)
    for reader in (model_info, load):
        with pytest.raises(ValueError, match=f"{out}: damaged or truncated .*unreadable metadata"):
            reader(out)


def test_array_table_entries_are_checked(model_file, tmp_path):
    meta, arrays = _read(model_file)
    key = meta["fitted"]["eigenvalues_"]["key"]
    for entry, message in [
        ([1, 2], "fitted attribute 'eigenvalues_': array .* is not an object"),
        ({"dtype": "<f8", "shape": "3", "sha256": "0" * 64}, "declares an invalid array"),
        ({"dtype": 3, "shape": [3], "sha256": "0" * 64}, "declares an invalid array"),
        ({"dtype": "|O", "shape": [3], "sha256": "0" * 64}, "declares an invalid array"),
        ({"dtype": "<f8", "shape": [3], "sha256": 5}, "has no SHA-256"),
    ]:
        m = copy.deepcopy(meta)
        m["arrays"][key] = entry
        out = tmp_path / "table.npz"
        _write_text(out, json.dumps(m, sort_keys=True), arrays)
        with pytest.raises(ValueError, match=f"{out}: malformed model metadata: .*{message}"):
            model_info(out)


def test_model_info_shows_the_true_kinds(model_file, tmp_path):
    meta, arrays = _read(model_file)
    meta["fitted_kinds"]["X_fit_"] = "array float64 (1, 1)"  # a lie about the array
    out = tmp_path / "kinds.npz"
    _write(out, meta, arrays)
    info = model_info(out)
    assert info["fitted_kinds"]["X_fit_"] == "array float64 (40, 4)"
    assert len(info["eigenvalues"]) == 2


# --- the training file's description ---------------------------------------------------------


def test_data_info_records_the_libsvm_index_base(saved_models, tmp_path):
    from fastkpca.persistence import load_with_info

    model = saved_models["exact"][1]
    path = tmp_path / "m.npz"
    save_model(model, path, data={"format": "libsvm", "libsvm_index_base": 0})
    assert load_with_info(path)[1]["data"] == {"format": "libsvm", "libsvm_index_base": 0}
    for base in (2, -1, "1", 1.0, True):
        with pytest.raises(ValueError, match="'data' key 'libsvm_index_base'"):
            save_model(model, tmp_path / "bad.npz", data={"libsvm_index_base": base})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]


# --- is_model_file --------------------------------------------------------------------------


def test_is_model_file_of_every_class(saved_models):
    for path, _, _ in saved_models.values():
        assert is_model_file(path) is True
        assert is_model_file(str(path)) is True


def test_is_model_file_is_false_for_everything_else(model_file, tmp_path):
    X = np.ones((3, 2))
    cases = {}
    cases["missing"] = tmp_path / "missing.npz"
    cases["folder"] = tmp_path
    (tmp_path / "notes.txt").write_text("hello")
    cases["text"] = tmp_path / "notes.txt"
    cases["empty"] = tmp_path / "empty.npz"
    cases["empty"].write_bytes(b"")
    np.save(tmp_path / "a.npy", X)
    cases["npy"] = tmp_path / "a.npy"
    np.savez(tmp_path / "plain.npz", X=X)
    cases["plain npz"] = tmp_path / "plain.npz"
    np.savez(tmp_path / "other.npz", __fastkpca__=np.array(json.dumps({"format": "other"})))
    cases["other format"] = tmp_path / "other.npz"
    np.savez(tmp_path / "pickled.npz", __fastkpca__=np.array([{"format": "x"}], dtype=object))
    cases["pickled metadata"] = tmp_path / "pickled.npz"
    half = tmp_path / "half.npz"
    half.write_bytes(model_file.read_bytes()[: model_file.stat().st_size // 2])
    cases["truncated"] = half
    os.mkfifo(tmp_path / "pipe")
    cases["pipe"] = tmp_path / "pipe"  # must not block waiting for a writer
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases["dangling link"] = tmp_path / "dangling"
    for what, path in cases.items():
        assert is_model_file(path) is False, what
    (tmp_path / "link.npz").symlink_to(model_file)
    assert is_model_file(tmp_path / "link.npz") is True


def test_is_model_file_reads_only_the_directory_and_the_metadata(model_file, tmp_path):
    """A model whose arrays are damaged, or from a newer format, is still a model file; the
    arrays are never read (a 64 MiB deflate bomb in one costs nothing)."""
    out = tmp_path / "bomb.npz"
    _deflated_bomb(model_file, out, declared=2**32 - 1)

    def check():
        assert is_model_file(out) is True

    assert least_traced_peak(check) < 2**20
    meta, arrays = _read(model_file)
    meta["format_version"] = persistence.FORMAT_VERSION + 1
    newer = tmp_path / "newer.npz"
    _write(newer, meta, arrays)
    assert is_model_file(newer) is True


# --- atomic_output --------------------------------------------------------------------------


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError])
def test_atomic_output_removes_its_temporary_file_on_any_exception(tmp_path, interrupt):
    target = tmp_path / "out.npy"
    target.write_bytes(b"old")
    with pytest.raises(interrupt):
        with atomic_output(target) as tmp:
            tmp.write_bytes(b"half of the new")
            raise interrupt()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.npy"]


def test_atomic_output_interrupted_right_after_creating_the_temporary_file(tmp_path, monkeypatch):
    """The temporary file is removed even when the interruption comes before the block runs
    (between the file's creation and the closing of its descriptor)."""
    real_close = os.close
    calls = []

    def interrupted_close(fd):
        real_close(fd)
        if not calls:
            calls.append(fd)
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "close", interrupted_close)
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(tmp_path / "out.npy"):
            pass  # pragma: no cover - not reached
    monkeypatch.undo()
    assert calls and list(tmp_path.iterdir()) == []


def test_interrupted_save_leaves_no_trace(saved_models, tmp_path, monkeypatch):
    model = saved_models["exact"][1]
    target = tmp_path / "m.npz"
    target.write_bytes(b"previous model")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", interrupted)
    with pytest.raises(KeyboardInterrupt):
        model.save(target)
    assert target.read_bytes() == b"previous model"
    assert [p.name for p in tmp_path.iterdir()] == ["m.npz"]


# --- the declarations ------------------------------------------------------------------------


def test_every_saveable_and_state_class_is_declared():
    import fastkpca.features  # noqa: F401 - registers the feature maps
    import fastkpca.sketch  # noqa: F401 - registers the sketches
    from fastkpca._state import STATE_CLASSES

    assert set(FITTED_SCHEMAS) == set(SAVEABLE)
    registered = {name for name in STATE_CLASSES if name.startswith("fastkpca.")}
    assert registered == set(STATE_SCHEMAS)


def test_save_refuses_a_model_that_would_not_load(saved_models, tmp_path):
    """save_model runs load's checks: a model damaged in memory is not written."""
    model = copy.deepcopy(saved_models["nystrom"][1])
    model.components_ = model.components_[:, :-1]
    with pytest.raises(ValueError, match="cannot save this NystromKPCA: fitted attribute"):
        model.save(tmp_path / "m.npz")
    model = copy.deepcopy(saved_models["exact"][1])
    model.set_params(gamma=-1.0)
    with pytest.raises(ValueError, match="cannot save this ExactKPCA: invalid parameters: gamma"):
        model.save(tmp_path / "m.npz")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["fastkpca.__main__.X", "fastkpca.cli.main", "fastkpca._demo.X"])
def test_a_state_class_name_imports_nothing(model_file, tmp_path, monkeypatch, name):
    """Naming a fastkpca module in a state class must not import it: importing
    ``fastkpca.__main__`` would run the command line."""
    import sys

    meta, arrays = _read(model_file)
    meta["fitted"]["kernel_"] = {"kind": "state", "class": name, "state": None}
    out = tmp_path / "state.npz"
    _write(out, meta, arrays)
    module = name.rsplit(".", 1)[0]
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setattr(sys, "argv", ["fastkpca", "--version"])
    with pytest.raises(ValueError, match=f"{out}: .*unknown class '{name}'"):
        load(out)
    assert module not in sys.modules


def test_zip64_end_records_are_read(model_file, tmp_path, monkeypatch):
    """A directory declared in zip64 end records (large archives) is sized from them."""
    out = tmp_path / "zip64.npz"
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 1)  # zipfile then writes zip64 records
    _copy_archive(model_file, out)
    monkeypatch.undo()
    assert b"PK\x06\x06" in out.read_bytes()
    assert is_model_file(out)
    np.testing.assert_array_equal(load(out).eigenvalues_, load(model_file).eigenvalues_)
