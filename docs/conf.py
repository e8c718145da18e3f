"""Sphinx configuration of the fastkpca documentation (``make docs``).

Sphinx rather than MkDocs: the docstrings are numpydoc with Sphinx roles (:class:`~fastkpca.X`,
:func:`...`, :mod:`...`), which autodoc + napoleon render and resolve natively, and ``-n -W``
turns every unresolved reference to one of fastkpca's own objects into an error.  The pages are
Markdown (MyST), so the paper pages stay plain Markdown.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # a plain checkout builds too (make docs installs it)

project = "fastkpca"
author = "fastkpca developers"
copyright = "fastkpca developers, BSD-3-Clause"

import fastkpca  # noqa: E402

release = version = fastkpca.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "figures/*.json", "**/README.md", "gallery/*.ipynb"]

# --- examples gallery (sphinx-gallery) ----------------------------------------------------------
# examples/plot_*.py run at every build; their output and figures go into docs/gallery (not
# committed).  An example that fails fails the build; _check_gallery_figures (below) fails it
# when a gallery page lacks the figures its example draws.
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": str(HERE / "gallery"),
    "filename_pattern": r"/plot_",
    "within_subsection_order": "FileNameSortKey",
    "abort_on_example_error": True,
    "write_computation_times": False,
    "show_memory": False,
    "download_all_examples": False,
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "first_notebook_cell": "%matplotlib inline",
}
os.environ.setdefault("MPLBACKEND", "Agg")  # no display needed

# --- Markdown (MyST) -----------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# --- API reference -------------------------------------------------------------------------------
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "none"  # the numpydoc "Parameters" sections carry the types
autodoc_class_signature = "mixed"
autodoc_preserve_defaults = True
autosummary_generate = False
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
# The types are prose ("int, float in (0, 1) or None", "array of shape (n, d)"): render them as
# text, not as cross-references to classes named "optional" or "shape".
napoleon_preprocess_types = False
napoleon_use_param = False
napoleon_use_keyword = False
# "Attributes" as a field list like "Parameters" (not one ``.. attribute::`` per entry, which
# would clash with the documented properties of the same names).
napoleon_custom_sections = [("Attributes", "params_style")]
add_module_names = False
python_use_unqualified_type_names = True

# --- strictness ----------------------------------------------------------------------------------
# -n (nitpicky) with -W: a reference to an object that is not documented fails the build.  Only
# references into other projects are exempt (there is no network at build time, so no
# intersphinx): Python builtins, numpy, scipy, scikit-learn, dask, pandas, pyarrow, matplotlib.
nitpicky = True
_EXTERNAL = r"(np|numpy|scipy|sp|sklearn|dask|da|distributed|pandas|pd|pyarrow|matplotlib|tqdm)"
nitpick_ignore_regex = [
    # Private helpers (a name with a component starting with "_") are not documented.
    (r"py:.*", r"(.*\.)?_[A-Za-z].*"),
    (r"py:.*", _EXTERNAL + r"(\..*)?"),
    (r"py:.*", r"(int|float|str|bool|list|tuple|dict|object|None|bytes|callable|iterable)"),
    (r"py:.*", r"(os|io|pathlib|typing|collections|argparse|Path|PathLike)(\..*)?"),
]
suppress_warnings = [
    # Paper pages may start at "##" or skip a level; not worth failing the build over.
    "myst.header",
]

# --- HTML ----------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"fastkpca {release}"
html_static_path: list[str] = []


# --- generated pages -----------------------------------------------------------------------------
def _write_cli_page() -> None:
    """docs/_generated/cli.md: the ``--help`` of ``fastkpca`` and of each subcommand, from the
    argparse parser itself (so the CLI page cannot go stale)."""
    from fastkpca.cli import build_parser

    parser = build_parser()
    os.environ["COLUMNS"] = "100"  # argparse wraps help at $COLUMNS: same page everywhere
    parts = ["```text", parser.format_help().rstrip(), "```", ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts += [f"## `fastkpca {name}`", "", "```text", sub.format_help().rstrip()]
                parts += ["```", ""]
    out = HERE / "_generated" / "cli.md"
    out.parent.mkdir(exist_ok=True)
    text = "\n".join(parts)
    if not out.exists() or out.read_text() != text:
        out.write_text(text)


_write_cli_page()


# --- docstring and reference fix-ups -------------------------------------------------------------
_BACKTICKS = re.compile(r"(`+[^`]*`+)")
# ``components_`` and ``n_landmarks_`` in prose are reStructuredText reference syntax (``name_``);
# ``|K_ij|`` is substitution syntax.  The docstrings mean them literally: escape them outside
# inline literals and roles.
_TRAILING_UNDERSCORE = re.compile(r"(?<![\\\w])([A-Za-z]\w*?)_(?=[\s,.;:)\]}/]|$)")
_BARS = re.compile(r"(?<![\\|])\|([^|`\s][^|`]*?)\|(?!\|)")


def _escape_prose(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        parts = _BACKTICKS.split(line)
        for j in range(0, len(parts), 2):  # even parts are outside backticks
            part = _TRAILING_UNDERSCORE.sub(r"\1\\_", parts[j])
            parts[j] = _BARS.sub(r"\\|\1\\|", part)
        lines[i] = "".join(parts)


_ONE_LINE_ENTRY = re.compile(r"^(\s*)([A-Za-z_*][\w*]*(?:, [A-Za-z_*][\w*]*)*) : (\S.*)$")
_SECOND_ENTRY = re.compile(r"(?<=\.)\s+([A-Za-z_][\w]*(?:, [A-Za-z_][\w]*)*) : ")


def _one_line_entries(app, what, name, obj, options, lines):
    """Many entries read ``name : description.`` on one line (``tol, max_iter : iterative-solver
    stopping parameters.``), some two to a line (``degree, coef0 : ...  nu : ...``).  numpydoc
    reads the text after the colon as the type; when nothing indented follows, it is the
    description: move it to its own indented line (before napoleon parses the sections)."""
    out = []
    for i, line in enumerate(lines):
        m = _ONE_LINE_ENTRY.match(line)
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        continued = nxt.strip() and len(nxt) - len(nxt.lstrip()) > len(line) - len(line.lstrip())
        if m is None or continued or " " not in m.group(3).strip():  # "k." would be a list item
            out.append(line)
            continue
        indent = m.group(1)
        entries = _SECOND_ENTRY.split(f"{m.group(2)} : {m.group(3)}")
        # split gives [first "names : text", names2, text2, names3, text3, ...]
        first_names, _, first_text = entries[0].partition(" : ")
        pairs = [(first_names, first_text)] + list(zip(entries[1::2], entries[2::2], strict=True))
        for names, text in pairs:
            out += [indent + names, indent + "    " + text.strip()]
    lines[:] = out


def _prose_first_line(app, what, name, obj, options, lines):
    """A property's first line is prose, not ``type: description``.

    napoleon reads the first line of a property or attribute docstring as ``type: description``
    when it has a colon (``The number of the first feature in the file: 0 or 1.`` would get the
    type "The number of the first feature in the file").  When the text before the colon is
    prose (has a space), the line is broken after the colon: a first line that ends with its
    colon is read as description only, and the paragraph renders the same.
    """
    if what not in ("property", "attribute", "data"):
        return
    from sphinx.ext.napoleon.docstring import _single_colon_regex, _xref_or_code_regex

    for i, line in enumerate(lines):
        if not line.strip():
            continue
        parts = _xref_or_code_regex.split(line)
        for j in range(0, len(parts), 2):  # even parts are outside code and roles
            m = _single_colon_regex.search(parts[j])
            if m is None:
                continue
            before = "".join(parts[:j]) + parts[j][: m.end()]
            after = parts[j][m.end() :] + "".join(parts[j + 1 :])
            if " " in before.strip() and after.strip():
                indent = line[: len(line) - len(line.lstrip())]
                lines[i : i + 1] = [before.rstrip(), indent + after.strip()]
            break
        return


def _skip_foreign_members(app, what, name, obj, skip, options):
    """Inherited members from scikit-learn (set_output, get_params, ...) are documented there."""
    module = getattr(obj, "__module__", None) or ""
    if what == "class" and module.split(".")[0] in ("sklearn", "builtins"):
        return True
    return None


def _resolve_short_names(app, env, node, contnode):
    """Resolve the references the docstrings write against their own module.

    1. A name that is documented under a fastkpca path ending in it (``save_model`` ->
       ``fastkpca.io.save_model``; ``fastkpca.decomposition.exact.ExactKPCA`` ->
       ``fastkpca.ExactKPCA``; several paths of one re-exported object count once): a link.
    2. A fastkpca object that exists but is not part of the documented API (a module constant,
       a helper outside ``__all__``, an instance attribute named in its class's docstring):
       rendered as code, without a link.
    3. Anything else (a typo, a renamed or removed function): left unresolved, so the strict
       build fails.
    """
    if node.get("refdomain") != "py":
        return None
    target = re.sub(r"\s+", "", node["reftarget"]).lstrip(".~")
    domain = env.get_domain("py")
    parts = target.split(".")
    if parts[0] == "fastkpca":
        parts = parts[1:]
    for width in range(len(parts), 0, -1):
        tail = "." + ".".join(parts[-width:])
        found = sorted(
            (
                full
                for full in domain.objects
                if full.startswith("fastkpca.") and full.endswith(tail)
            ),
            key=len,
        )
        if found and (len(found) == 1 or _same_object(found)):
            from sphinx.util.nodes import make_refnode

            entry = domain.objects[found[0]]
            return make_refnode(
                app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, found[0]
            )
        if found:
            return None  # ambiguous: let Sphinx report it
    if _exists_in_fastkpca(target, node.get("py:module"), node.get("py:class")):
        return contnode
    return None


def _lookup(path):
    """The object at a dotted path (module, then attributes), or None."""
    import importlib

    pieces = path.split(".")
    for cut in range(len(pieces), 0, -1):
        try:
            obj = importlib.import_module(".".join(pieces[:cut]))
        except ImportError:
            continue
        for piece in pieces[cut:]:
            obj = getattr(obj, piece, None)
            if obj is None:
                return None
        return obj
    return None


def _same_object(names):
    """Whether the documented paths all name one Python object (re-exports)."""
    objs = [_lookup(full) for full in names]
    return objs[0] is not None and all(o is objs[0] for o in objs)


def _exists_in_fastkpca(target, module, cls):
    prefixes = [p for p in (module and cls and f"{module}.{cls}", module) if p]
    prefixes += sorted(m for m in sys.modules if m == "fastkpca" or m.startswith("fastkpca."))
    for prefix in prefixes:
        candidate = target if target.startswith("fastkpca") else f"{prefix}.{target}"
        if _lookup(candidate) is not None:
            return True
    # an instance attribute, documented in its class's "Attributes" section
    if module and cls:
        owner = _lookup(f"{module}.{cls}")
        if owner is not None and re.search(rf"\b{re.escape(target)}\b", owner.__doc__ or ""):
            return True
    return False


def _check_gallery_figures(app, exception):
    """Every example that draws (``plt.show()``) has its figures on its rendered page."""
    if exception is not None or app.builder.format != "html":
        return
    examples = sorted((HERE.parent / "examples").glob("plot_*.py"))
    problems = []
    for example in examples:
        if "plt.show()" not in example.read_text():
            continue
        page = Path(app.outdir) / "gallery" / f"{example.stem}.html"
        html = page.read_text() if page.is_file() else ""
        images = re.findall(rf'src="[^"]*(sphx_glr_{example.stem}_\d+\.png)"', html)
        if not images:
            problems.append(f"{page.name}: no figure of {example.name}")
        for image in images:
            if not (Path(app.outdir) / "_images" / image).is_file():
                problems.append(f"{page.name}: {image} missing from _images")
    if not examples or problems:
        raise RuntimeError("gallery check failed: " + ("; ".join(problems) or "no examples"))


def setup(app):
    app.connect("build-finished", _check_gallery_figures)
    app.connect("autodoc-process-docstring", _one_line_entries, priority=400)  # before napoleon
    app.connect("autodoc-process-docstring", _prose_first_line, priority=400)
    app.connect("autodoc-process-docstring", _escape_prose)
    app.connect("autodoc-skip-member", _skip_foreign_members)
    app.connect("missing-reference", _resolve_short_names)
