"""Counts of the package's structure: device twins, placement branches, import circles.

What it counts, over ``src/fastkpca`` (read as text and syntax trees; nothing is imported):

``twin_functions``
    Functions and methods outside ``execution/`` whose name marks them as a second, device or
    array-namespace copy of another function: a name with the token ``xp`` (``_xp_dense``,
    ``diag_xp``) or ``device`` (``device_exact_kpca``, ``_device_chunk``).  Listed by name.
``placement_branches``
    ``if`` statements and conditional expressions in ``decomposition/`` whose test reads where
    the data live: ``.host``, ``is_host_array``, ``in_host_memory``, ``_on_device``, ``is_cuda``
    or ``is_torch``.
``placement_of_calls``, ``to_host_calls``
    Calls of ``placement_of(`` and ``to_host(`` outside ``execution/``.
``import_circles``
    Strongly connected components (more than one module) of the graph of module-level imports
    between fastkpca modules.
``function_level_imports``
    ``import`` statements of fastkpca modules inside a function or method (lazy imports of
    optional dependencies are not counted).
``lines``
    Lines of ``src/fastkpca/**/*.py``.

Usage::

    python benchmarks/structure_counts.py            # the table
    python benchmarks/structure_counts.py --json     # the same as JSON
    python benchmarks/structure_counts.py --list     # with the names behind each count
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fastkpca"

_TWIN_NAME = re.compile(r"(^|_)(xp|device)(_|$)")
_PLACEMENT_TESTS = ("host", "is_host_array", "in_host_memory", "_on_device", "is_cuda", "is_torch")


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The fastkpca modules an ``from ... import ...`` names (a name may be a submodule)."""
    if node.level:
        base = module.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    names = [target] + [f"{target}.{alias.name}" for alias in node.names]
    return [n for n in names if n.startswith("fastkpca")]


def _function_level(tree: ast.AST):
    """Import nodes that sit inside a function body."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import | ast.ImportFrom) and in_function:
                found.append(child)
            visit(child, inside)

    visit(tree, False)
    return found


def _top_level_imports(tree: ast.AST):
    """Import nodes outside any function (module level, class bodies, ``if`` blocks); those
    under ``if TYPE_CHECKING`` are left out (they are not run)."""
    found = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def counts(root: Path = PACKAGE) -> dict:
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    twins, branches, fn_imports = [], [], []
    placement_calls = to_host_calls = lines = 0
    for module, path in modules.items():
        text = path.read_text()
        lines += text.count("\n")
        tree = ast.parse(text)
        rel = path.relative_to(root).as_posix()
        in_execution = rel.startswith("execution/")
        is_package = path.name == "__init__.py"
        for node in _top_level_imports(tree):
            if isinstance(node, ast.ImportFrom):
                targets = _resolve(module, is_package, node)
            else:
                targets = [a.name for a in node.names if a.name.startswith("fastkpca")]
            for t in targets:
                if t in modules and t != module:
                    graph[module].add(t)
        for node in _function_level(tree):
            if isinstance(node, ast.ImportFrom):
                targets = _resolve(module, is_package, node)
            else:
                targets = [a.name for a in node.names if a.name.startswith("fastkpca")]
            if targets:
                fn_imports.append(f"{rel}:{node.lineno}")
        if in_execution:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _TWIN_NAME.search(
                node.name
            ):
                twins.append(f"{rel}:{node.lineno}:{node.name}")
            if rel.startswith("decomposition/") and isinstance(node, ast.If | ast.IfExp):
                test = ast.unparse(node.test)
                if any(re.search(rf"\b{re.escape(t)}\b", test) for t in _PLACEMENT_TESTS):
                    branches.append(f"{rel}:{node.lineno}: {test[:70]}")
        placement_calls += len(re.findall(r"\bplacement_of\(", text))
        to_host_calls += len(re.findall(r"\bto_host\(", text))
    circles = _sccs(graph)
    return {
        "twin_functions": len(twins),
        "placement_branches": len(branches),
        "placement_of_calls": placement_calls,
        "to_host_calls": to_host_calls,
        "import_circles": len(circles),
        "function_level_imports": len(fn_imports),
        "lines": lines,
        "_lists": {
            "twin_functions": twins,
            "placement_branches": branches,
            "import_circles": [" <-> ".join(c) for c in circles],
            "function_level_imports": fn_imports,
        },
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--list", action="store_true", help="list the names behind each count")
    parser.add_argument("--root", type=Path, default=PACKAGE, help="the package folder")
    parser.add_argument(
        "--quick", action="store_true", help="accepted for `fastkpca bench` (the counts are quick)"
    )
    args = parser.parse_args(argv)
    result = counts(args.root)
    lists = result.pop("_lists")
    if args.json:
        print(json.dumps({**result, **({"lists": lists} if args.list else {})}, indent=2))
        return 0
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    if args.list:
        for key, items in lists.items():
            print(f"\n{key}:")
            for item in items:
                print(f"  {item}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
