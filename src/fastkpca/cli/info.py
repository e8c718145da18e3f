"""``fastkpca info``: what a model file holds."""

from __future__ import annotations

import json

from ..persistence import model_info


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


def run(args):

    meta = model_info(args.model)
    if args.json:
        print(json.dumps({k: v for k, v in meta.items() if k not in ("fitted",)}, indent=2))
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
    print(
        "parameters:      "
        + ", ".join(f"{k}={_render(v)}" for k, v in sorted(meta["params"].items()))
    )
    print("attributes:")
    for name, kind in sorted(meta.get("fitted_kinds", {}).items()):
        print(f"  {name:<24}{kind}")
    return 0
