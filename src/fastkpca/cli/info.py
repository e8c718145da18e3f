"""``fastkpca info``: what a model file holds."""

from __future__ import annotations

import json

import numpy as np

from ..persistence import load, model_info


def _render(node):
    """A model-file metadata value, briefly."""
    if isinstance(node, dict):
        kind = node.get("kind")
        if kind in ("array", "scalar", "sparse"):
            return f"<{kind}>"
        if kind == "float":
            return node["value"]
        if kind == "kernel":
            return _render(node["config"])
        if kind in ("list", "tuple"):
            return "[" + ", ".join(_render(v) for v in node["items"]) + "]"
        if kind == "dict":
            return "{" + ", ".join(f"{k}: {_render(v)}" for k, v in node["items"].items()) + "}"
        if kind == "state":
            return f"<{node['class']}>"
        return "{" + ", ".join(f"{k}={v}" for k, v in node.items()) + "}"
    return repr(node)


def _chosen(path) -> dict | None:
    """What an AutoKPCA model chose (None for another model): the method, the estimator, its
    size and the error estimated when it was chosen, with the chosen estimator's component
    count and eigenvalues (the model file nests them in that estimator)."""
    model = load(path)
    inner = getattr(model, "estimator_", None)
    if inner is None or not hasattr(model, "method_"):
        return None
    entry: dict = next(
        (e for e in getattr(model, "report_", []) or [] if e.get("status") == "chosen"), {}
    )
    eigenvalues = getattr(inner, "eigenvalues_", None)
    return {
        "method": model.method_,
        "estimator": type(inner).__name__,
        "size_name": entry.get("size_name"),
        "size": entry.get("size"),
        "error": entry.get("error"),
        "error_stderr": entry.get("error_stderr"),
        "n_components": getattr(inner, "n_components_", None),
        "eigenvalues": None if eigenvalues is None else np.asarray(eigenvalues).tolist(),
    }


def _chosen_lines(chosen: dict) -> list[str]:
    size = f", {chosen['size_name']}={chosen['size']}" if chosen.get("size_name") else ""
    error = ""
    if chosen.get("error") is not None:
        stderr = chosen.get("error_stderr")
        spread = f" +- {stderr:.2g}" if stderr is not None else ""
        error = f"; estimated relative rank-k error {chosen['error']:.4f}{spread}"
    lines = [f"chosen method:   {chosen['method']} ({chosen['estimator']}{size}{error})"]
    if chosen.get("n_components") is not None:
        lines.append(f"n_components_:   {chosen['n_components']}")
    if chosen.get("eigenvalues") is not None:
        lines.append("eigenvalues:     " + " ".join(f"{v:.6g}" for v in chosen["eigenvalues"]))
    return lines


def run(args):
    meta = model_info(args.model)
    chosen = _chosen(args.model) if meta.get("estimator") == "AutoKPCA" else None
    if args.json:
        out = {k: v for k, v in meta.items() if k not in ("fitted",)}
        if chosen is not None:
            out["chosen"] = chosen
        print(json.dumps(out, indent=2))
        return 0
    kernel = meta.get("kernel") or {}
    kernel_text = ", ".join(f"{k}={v}" for k, v in kernel.items() if k != "kernel")
    fitted = meta.get("fitted", {})
    print(f"file:            {args.model} ({meta['file_bytes'] / 1024:.1f} KiB)")
    print(
        f"format:          {meta['format']} version {meta['format_version']} (fastkpca "
        f"{meta.get('fastkpca_version')}, numpy {meta.get('numpy_version')})"
    )
    print(f"estimator:       {meta['estimator']}")
    if kernel:
        print(
            f"kernel:          {kernel.get('kernel')}"
            + (f" ({kernel_text})" if kernel_text else "")
        )
    for name in ("n_features_in_", "n_components_", "n_samples_seen_"):
        if name in fitted:
            print(f"{name + ':':<17}{_render(fitted[name])}")
    eig = meta.get("eigenvalues")
    if eig is not None:
        print("eigenvalues:     " + " ".join(f"{v:.6g}" for v in eig))
    if chosen is not None:
        print("\n".join(_chosen_lines(chosen)))
    print(
        "parameters:      "
        + ", ".join(f"{k}={_render(v)}" for k, v in sorted(meta["params"].items()))
    )
    print("attributes:")
    for name, kind in sorted(meta.get("fitted_kinds", {}).items()):
        print(f"  {name:<24}{kind}")
    return 0
