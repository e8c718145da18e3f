"""The documentation tells the truth: its code runs, its commands exist, its figures agree.

- The ``python`` code blocks of README.md and of every page under docs/ run in order, one
  namespace per page, in a temporary folder (so nothing is written into the checkout).  A
  ``text`` block right after a ``python`` block is that block's printed output and must match it
  (numbers to the last digit shown, +-1.5 units).  A block that needs something optional that is
  missing here (dask, distributed, torch, a GPU, the real data sets) is skipped with the reason,
  and so are the page's later blocks, which build on it; nothing is skipped silently.
- Every ``fastkpca ...`` command of a shell block names a subcommand and options that the
  parser has; every ``python benchmarks/<script>.py`` exists and has the options shown; every
  ``make <target>`` is in the Makefile; every ``pip install "fastkpca[extra]"`` is an extra.
- Measured figures quoted on several pages are generated from benchmarks/results/*.json
  (``docs/results_tables.py --check``); embedded figures resolve to committed files.
- Pages speak of fastkpca alone (no lock files, folders beside the repository, issue numbers),
  and the README renders on a package index (absolute links only).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex
import sys
from pathlib import Path

import pytest
from conftest import SHARED_DATA

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md"] + sorted(
    p for p in DOCS.rglob("*.md") if "_generated" not in p.parts and "gallery" not in p.parts
)
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def _blocks(path: Path) -> list[tuple[str, str, int, int]]:
    """(language, code, line number, end offset) of each fenced block of a Markdown page."""
    text = path.read_text()
    return [
        (m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, m.end())
        for m in _FENCE.finditer(text)
    ]


def _with_outputs(path: Path) -> list[tuple[str, int, str | None]]:
    """(code, line, expected output or None) for each python block of a page."""
    text = path.read_text()
    blocks = _blocks(path)
    out = []
    for i, (lang, code, line, end) in enumerate(blocks):
        if lang != "python":
            continue
        expected = None
        if i + 1 < len(blocks):
            nlang, ncode, _, _ = blocks[i + 1]
            between = text[end : text.index("```" + nlang, end)]
            if nlang == "text" and not between.strip():
                expected = ncode
        out.append((code, line, expected))
    return out


# --- optional requirements ------------------------------------------------------------------------


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _cuda() -> bool:
    if not _has("torch"):
        return False
    import torch

    return bool(torch.cuda.is_available())


_NEEDS = [
    (re.compile(r"^\s*(import|from)\s+dask\b", re.M), lambda: _has("dask"), "dask"),
    (
        re.compile(r"^\s*(import|from)\s+distributed\b", re.M),
        lambda: _has("distributed"),
        "distributed",
    ),
    (
        re.compile(r"^\s*(import|from)\s+pyarrow\b|\.parquet\b", re.M),
        lambda: _has("pyarrow"),
        "pyarrow",
    ),
    (re.compile(r"^\s*(import|from)\s+torch\b", re.M), lambda: _has("torch"), "torch"),
    (re.compile(r"[\"']cuda"), _cuda, "a CUDA GPU"),
    (
        re.compile(
            r"datasets\.(load|fetch)\(|^\s*from fastkpca\.datasets import .*\b(load|fetch)\b",
            re.M,
        ),
        lambda: SHARED_DATA.is_dir(),
        "the real data sets",
    ),
]


def _missing(code: str) -> list[str]:
    return [what for pattern, available, what in _NEEDS if pattern.search(code) and not available()]


# --- printed output -------------------------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _matches(actual: str, expected: str) -> bool:
    """Same text, and numbers equal to within 1.5 units of the last digit shown."""
    a_words, e_words = _NUMBER.split(actual.strip()), _NUMBER.split(expected.strip())
    if [w.split() for w in a_words] != [w.split() for w in e_words]:
        return False
    for a, e in zip(_NUMBER.findall(actual), _NUMBER.findall(expected), strict=True):
        mantissa = re.split(r"[eE]", e)[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        exponent = int(re.split(r"[eE]", e)[1]) if re.search(r"[eE]", e) else 0
        if abs(float(a) - float(e)) > 1.5 * 10.0 ** (exponent - decimals):
            return False
    return True


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _with_outputs(p)], ids=lambda p: str(p.relative_to(ROOT))
)
@pytest.mark.filterwarnings("error::RuntimeWarning")  # a documented example warns of nothing
@pytest.mark.filterwarnings("error::fastkpca.kernels.DegenerateKernelWarning")
def test_page_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # files the examples write go here
    monkeypatch.setenv("MPLBACKEND", "Agg")
    name = page.relative_to(ROOT)
    namespace: dict = {"__name__": "__docs__"}
    with contextlib.ExitStack() as stack:
        stack.callback(_close_clusters, namespace)
        for i, (code, line, expected) in enumerate(_with_outputs(page)):
            missing = _missing(code)
            if missing:
                pytest.skip(
                    f"{name} line {line} (block {i + 1}) and the blocks after it need "
                    f"{', '.join(missing)}, not available here"
                )
            stdout = io.StringIO()
            try:
                with contextlib.redirect_stdout(stdout):
                    exec(compile(code, f"{name}:{line}", "exec"), namespace)
            except Exception as exc:  # name the failing block in the report
                pytest.fail(f"{name} python block at line {line} failed: {exc!r}\n{code}")
            if expected is not None:
                assert _matches(stdout.getvalue(), expected), (
                    f"{name} line {line}: printed\n{stdout.getvalue()}\n"
                    f"but the page shows\n{expected}"
                )
        running = _running_clusters(namespace)
        assert not running, f"{name} leaves {running} running: close them at its end"


def _dask_objects(namespace: dict) -> dict:
    """The dask clients in a page's namespace and their clusters (a cluster made inline, as in
    ``Client(LocalCluster())``, has no name of its own), by name."""
    found = {}
    for key, value in namespace.items():
        if type(value).__module__.startswith("distributed") and hasattr(value, "close"):
            found[key] = value
            if getattr(value, "cluster", None) is not None:
                found[f"{key}.cluster"] = value.cluster
    return found


def _running_clusters(namespace: dict) -> list[str]:
    """The names of the dask clients and clusters of a page still running."""
    running = []
    for key, value in _dask_objects(namespace).items():
        status = getattr(value, "status", None)
        if getattr(status, "value", status) != "closed":
            running.append(key)
    return running


def _close_clusters(namespace: dict) -> None:
    """Close the dask clients and clusters a page's blocks left open (should a block fail
    before the page closes them): their worker processes and heartbeats would otherwise run
    through the rest of the test session."""
    for value in _dask_objects(namespace).values():
        value.close()  # a second close of a client or cluster does nothing


def test_docs_code_fits_the_page():
    """Code lines of at most 88 characters do not overflow the page at 1280 px (furo)."""
    long = [
        f"{p.relative_to(ROOT)}:{line + j}"
        for p in PAGES
        for lang, code, line, _ in _blocks(p)
        if lang in ("python", "sh", "text") and "_generated" not in str(p)
        for j, text in enumerate(code.splitlines(), start=1)
        if len(text) > 88 and not text.startswith("|")
    ]
    assert not long, f"code lines over 88 characters: {long}"


def test_quickstart_has_outputs():
    assert sum(e is not None for _, _, e in _with_outputs(DOCS / "quickstart.md")) >= 3


# --- shell commands -------------------------------------------------------------------------------


def _commands():
    """(page, line, argv) of each command line of the pages' shell blocks."""
    for page in PAGES:
        for lang, code, line, _ in _blocks(page):
            if lang not in ("sh", "bash", "console", "shell"):
                continue
            for j, text in enumerate(code.splitlines(), start=1):
                text = re.sub(r"(^|\s)#.*$", "", text).strip()
                if text:
                    yield page.relative_to(ROOT), line + j, shlex.split(text)


def _subcommand_options() -> dict[str, set[str]]:
    from fastkpca.cli import build_parser

    parser = build_parser()
    top = {s for a in parser._actions for s in a.option_strings}
    found = {"": top}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = {s for a in sub._actions for s in a.option_strings}
    return found


def test_shell_commands_exist():
    options = _subcommand_options()
    makefile = (ROOT / "Makefile").read_text()
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    problems, checked = [], 0
    for page, line, argv in _commands():
        where = f"{page}:{line}"
        if argv[0] == "fastkpca":
            checked += 1
            words = [w for w in argv[1:] if not w.startswith("-")]
            command = words[0] if words else ""
            if command not in options:
                problems.append(f"{where}: no subcommand {command!r}")
                continue
            for word in argv[1:]:
                flag = word.split("=")[0]
                if flag.startswith("-") and flag not in options[command] | options[""]:
                    problems.append(f"{where}: fastkpca {command} has no option {flag}")
        elif argv[0] == "python" and len(argv) > 1 and argv[1].startswith("benchmarks/"):
            checked += 1
            script = ROOT / argv[1]
            if not script.is_file():
                problems.append(f"{where}: no script {argv[1]}")
                continue
            source = script.read_text()
            for word in argv[2:]:
                flag = word.split("=")[0]
                if flag.startswith("--") and f'"{flag}"' not in source:
                    problems.append(f"{where}: {argv[1]} has no option {flag}")
        elif argv[0] == "make":
            checked += 1
            for target in argv[1:]:
                if not re.search(rf"^{re.escape(target)}:", makefile, re.M):
                    problems.append(f"{where}: no make target {target}")
        elif argv[:2] == ["pip", "install"]:
            checked += 1
            for word in argv[2:]:
                m = re.fullmatch(r"(?:fastkpca|\.)\[([\w,-]+)\]", word)
                if m:
                    missing = set(m.group(1).split(",")) - extras
                    if missing:
                        problems.append(f"{where}: no extra {sorted(missing)}")
    assert checked >= 20, checked
    assert not problems, "\n".join(problems)


def test_benchmark_scripts_named_in_prose_exist():
    named = {m for p in PAGES for m in re.findall(r"benchmarks/(\w+\.py)", p.read_text())}
    assert named and all((ROOT / "benchmarks" / n).is_file() for n in named), named


# --- figures and words ----------------------------------------------------------------------------


def test_quoted_figures_come_from_the_results_files():
    spec = importlib.util.spec_from_file_location("results_tables", DOCS / "results_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_tables"] = module
    spec.loader.exec_module(module)
    assert module.stale_pages() == [], "run python docs/results_tables.py"
    # each generated part is used, and the summary pages use them
    text = "".join(p.read_text() for p in PAGES)
    for name in module.GENERATORS:
        assert f"<!-- results: {name} " in text, name
    assert "<!-- results: goals-table " in (ROOT / "README.md").read_text()


def test_results_tables_check_passes():
    """``python docs/results_tables.py --check`` (the command the documentation names) passes:
    every generated part of every page, and the README's figure, match the results files."""
    import subprocess

    run = subprocess.run(
        [sys.executable, str(DOCS / "results_tables.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr


_GENERATED_PART = re.compile(
    r"<!-- results: (?P<name>[\w-]+) .*?<!-- end results: (?P=name) -->", re.S
)
_CHECKED_BLOCK = re.compile(r"^```(?:python|text)[^\n]*\n.*?^```[ \t]*$", re.S | re.M)
# A number with a unit of time, size or ratio: "3.3 s", "69 MB", "0.26x", "17 %".
_FIGURE = re.compile(
    r"(?<![\w.^])(?:\d[\d,]*\d|\d)(?:\.\d+)?"
    r"(?:x|\s?(?:s|ms|min|minutes|seconds|MB|GB|TB|KiB|MiB|GiB|%))(?![\w-])"
)
# Figures that are arithmetic, definitions or settings, not measurements.
_NOT_MEASURED = re.compile(
    r"3\.2 GB|80 GB at|8 TB"  # 8 n^2 bytes: a float64 Gram of 20,000, 100,000, 10^6 rows
    r"|Adult's would need 8 GB"  # its 31,561^2 Gram
    r"|--memory-limit 8GB"  # an option in a command
    r"|1\.05 is 5 % more error"  # the definition of the relative error
    r"|random 80 %, embed the other 20 %|the same 80 %|the 100 %"  # a train / test split
    r"|50 % down to 2 % of the terms|95 % quantile"  # a benchmark's settings
    r"|within (?:about )?5-10 % of exact"  # a threshold
)
# Pages whose figures are not (yet) generated: the command line's page is the parser's help;
# the AutoKPCA page still quotes its measured figures by hand.
_FIGURES_BY_HAND = {"docs/cli.md", "docs/auto.md"}


def test_measured_figures_are_generated():
    """A measured figure (a time, a size, a ratio, a share) appears on a page only inside a part
    that docs/results_tables.py writes from a results file, or in a block the tests run."""
    found = []
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        if name in _FIGURES_BY_HAND:
            continue
        text = page.read_text()
        blank = lambda m: "\n" * m.group(0).count("\n")  # noqa: E731 (keep line numbers)
        text = _CHECKED_BLOCK.sub(blank, _GENERATED_PART.sub(blank, text))
        for i, line in enumerate(text.splitlines(), start=1):
            rest = _NOT_MEASURED.sub("", line)
            found += [
                f"{name}:{i}: {hit!r} in {line.strip()[:70]}" for hit in _FIGURE.findall(rest)
            ]
    assert not found, "figures quoted by hand:\n" + "\n".join(found)


def test_readme_first_figure_is_generated_with_a_caption():
    """The README's first image is the one docs/results_tables.py draws, inside its generated
    part, followed by a caption that says what the axes and colours mean."""
    text = (ROOT / "README.md").read_text()
    first = re.search(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert first and first.group(1).endswith("/benchmarks/results/readme_fit_time_memory.png")
    part = re.search(
        r"<!-- results: readme-figure .*?<!-- end results: readme-figure -->", text, re.S
    )
    assert part and first.start() > part.start() and first.end() < part.end()
    caption = part.group(0)[first.end() - part.start() :]
    for words in ("Left:", "Right:", "seconds", "log scale", "blue", "grey"):
        assert words in caption, words
    assert (ROOT / "benchmarks" / "results" / "readme_fit_time_memory.png").is_file()


def test_figures_link_resolves_to_benchmark_results():
    link = DOCS / "figures"
    assert link.is_symlink(), "docs/figures must be a symlink (to ../benchmarks/results)"
    assert Path(link.readlink()).as_posix() == "../benchmarks/results"  # relative: any clone
    assert link.resolve() == (ROOT / "benchmarks" / "results").resolve()


@pytest.mark.parametrize("page", sorted((DOCS / "papers").glob("*.md")), ids=lambda p: p.name)
def test_paper_page_figures_exist(page):
    figures = re.findall(r"!\[[^\]]*\]\(\.\./figures/([^)\s]+)\)", page.read_text())
    missing = [f for f in figures if not (DOCS / "figures" / f).is_file()]
    assert not missing, f"{page.name} embeds missing figures: {missing}"


_INTERNAL = re.compile(
    r"flock|\.lock\b|\.\./shared|shared/papers|\bissue \d+|\bissues? #?\d+|\bsession\b|"
    r"\bother helpers\b|\bthe helper\b|\.venv/bin|/tmp/|/work/|\bissue\b|"
    r"development machine|\bwe (?:measured|ran|found|tried)\b|\bnot kept\b|\bvariant\b|"
    r"\bboth cores\b|\bSIMD path\b|\bcgroup timings?\b",
    re.I,
)


def test_pages_speak_of_fastkpca_alone():
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()[:80]}"
        for p in PAGES
        for i, line in enumerate(p.read_text().splitlines(), start=1)
        if _INTERNAL.search(line)
    ]
    assert not found, "\n".join(found)


def test_readme_links_are_absolute():
    """A package index renders the README alone: relative links and images would break."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'src="([^"]+)"', text)
    relative = [t for t in targets if not re.match(r"https?://", t)]
    assert targets and not relative, relative
    # one repository address, the one the package metadata names
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    repo = urls["Repository"]
    for t in targets:
        if "github.com" in t or "githubusercontent.com" in t:
            assert repo.split("github.com/")[1] in t, t


def test_streaming_paper_tables_are_the_benchmark_summary():
    """docs/papers/skpca.md's measured tables are what ``skpca_paper.py --summary`` prints
    from benchmarks/results/skpca_paper.json."""
    import subprocess

    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "skpca_paper.py"), "--summary"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("|")]
    page = (DOCS / "papers" / "skpca.md").read_text().splitlines()
    missing = [row for row in rows if row not in page]
    assert len(rows) > 100 and not missing, missing[:5]


# --- the estimators' docstrings -------------------------------------------------------------------

ESTIMATORS = [
    "AutoKPCA",
    "ExactKPCA",
    "KernelPCA",
    "NystromKPCA",
    "RandomFeatureKPCA",
    "StreamingKPCA",
    "ReducedSetKPCA",
    "SparsifiedKPCA",
    "CompressedKPCA",
]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimator_docstring_examples_run(name):
    """Each estimator's docstring has a See Also section and an Examples section whose doctest
    runs as shown, without a warning."""
    import doctest
    import warnings

    import fastkpca

    cls = getattr(fastkpca, name)
    doc = cls.__doc__ or ""
    for section in ("See Also", "Examples"):
        assert f"\n    {section}\n    {'-' * len(section)}\n" in doc, f"{name}: no {section}"
    finder = doctest.DocTestFinder(recurse=False)
    tests = finder.find(cls, name, globs={})
    assert tests and tests[0].examples, f"{name}: no doctest examples"
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    runner = doctest.DocTestRunner(optionflags=flags)
    report: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for test in tests:
            runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)
    assert result.attempted >= 3, f"{name}: too short an example ({result.attempted} lines)"


# --- the changelog and the citation ---------------------------------------------------------------


def test_release_is_dated_in_the_changelog_and_the_citation():
    """The version is a dated CHANGELOG release below an (open) Unreleased section, with its
    comparison link, and CITATION.cff names the same version and date."""
    import fastkpca

    yaml = pytest.importorskip("yaml")
    text = (ROOT / "CHANGELOG.md").read_text()
    version = re.escape(fastkpca.__version__)
    release = re.search(rf"^## \[{version}\] - (\d{{4}}-\d{{2}}-\d{{2}})$", text, re.M)
    assert release, f"no dated '## [{fastkpca.__version__}] - YYYY-MM-DD' heading"
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert headings[:2] == ["Unreleased", fastkpca.__version__], headings
    for name in headings:
        assert re.search(rf"^\[{re.escape(name)}\]: https://", text, re.M), name
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["version"] == fastkpca.__version__
    assert str(cff["date-released"]) == release.group(1)


_LAB_NOTES = re.compile(
    r"\d(?:\.\d+)?\s?(?:s|ms|x|MB|GB|MiB|GiB|%)(?![\w-])|->|\bcgroups?\b|\bH[12]00\b|"
    r"\bhand-written\b|\breference loop\b|\bmeasured\b",
    re.I,
)


def test_changelog_speaks_to_users():
    """What changed for a user, not how it was measured: no timings, machines or workflow."""
    text = (ROOT / "CHANGELOG.md").read_text()
    found = [
        f"CHANGELOG.md:{i}: {line.strip()[:80]}"
        for i, line in enumerate(text.splitlines(), start=1)
        if _LAB_NOTES.search(line) or _INTERNAL.search(line)
    ]
    assert not found, "\n".join(found)


# --- words defined in the glossary ----------------------------------------------------------------

# The methods' short names and the words of the papers that a reader cannot guess: each is defined
# in docs/glossary.md, and each page links its first use there.
_JARGON = {
    "RNCA": r"\bRNCA\b",
    "SKPCA": r"\bSKPCA\b",
    "WNystrom": r"\bWNystrom\b",
    "RPCholesky": r"\bRPCholesky\b",
    "ell": r"\bell\b",
    "shadow": r"\b[Ss]hadow\b",
    "paring": r"\b[Pp]aring\b",
    "herding": r"\b[Hh]erding\b",
    "probe": r"\b[Pp]robes?\b",
}
_GLOSSARY_LINK = re.compile(r"\{term\}`[^`]*`|\[[^\]]*\]\([^)]*glossary[^)]*\)")
_NOT_PROSE = re.compile(
    r"^```.*?^```[ \t]*$|<!--.*?-->|(?<!\})`[^`\n]*`|\]\([^)]*\)|^#+ [^\n]*$", re.S | re.M
)


def test_glossary_defines_the_jargon():
    text = (DOCS / "glossary.md").read_text()
    terms = set(re.findall(r"^(\S[^\n]*)\n  \S", text, re.M))
    assert set(_JARGON) <= terms, set(_JARGON) - terms
    index = (DOCS / "index.md").read_text()
    assert re.search(r"^glossary$", index, re.M), "the glossary is not in the index's toctree"
    assert "](glossary.md)" in index, "the index does not link the glossary"


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if p.name not in ("glossary.md", "cli.md", "auto.md")],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_first_use_of_jargon_links_the_glossary(page):
    """The first time a page uses one of the glossary's words in its prose (not in code, a
    heading or a generated part), that use links to the glossary."""
    text = _GENERATED_PART.sub(lambda m: " " * len(m.group(0)), page.read_text())
    linked = [m.span() for m in _GLOSSARY_LINK.finditer(text)]
    # the links' own backticks must not pair with those of inline code
    plain = _GLOSSARY_LINK.sub(lambda m: "~" * len(m.group(0)), text)
    hidden = [m.span() for m in _NOT_PROSE.finditer(plain)]

    def inside(pos, spans):
        return any(a <= pos < b for a, b in spans)

    unlinked = []
    for term, pattern in _JARGON.items():
        for m in re.finditer(pattern, text):
            if inside(m.start(), linked):
                break
            if inside(m.start(), hidden):
                continue
            line = text.count("\n", 0, m.start()) + 1
            unlinked.append(f"{term!r} first used at line {line} without a glossary link")
            break
    assert not unlinked, "\n".join(unlinked)


# --- the examples gallery -------------------------------------------------------------------------

EXAMPLES = sorted((ROOT / "examples").glob("plot_*.py"))


def test_gallery_covers_the_workflows():
    """The gallery (sphinx-gallery runs examples/plot_*.py when the site is built) shows the
    automatic choice, scikit-learn's model selection and pandas output."""
    sources = {p.name: p.read_text() for p in EXAMPLES}
    wanted = {
        "AutoKPCA": [r"\bAutoKPCA\(", r"\breport_\b"],
        "a Pipeline tuned by GridSearchCV": [r"\bPipeline\(", r"\bGridSearchCV\(", r"kpca__"],
        "pandas output": [r'set_output\(transform="pandas"\)', r"get_feature_names_out"],
    }
    for what, patterns in wanted.items():
        assert any(all(re.search(p, s) for p in patterns) for s in sources.values()), what
    for name, source in sources.items():
        assert source.startswith('"""\n'), f"{name}: sphinx-gallery needs a docstring title"


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_gallery_example_runs(example, tmp_path, monkeypatch):
    """Each example runs as a script (what the site build does), here with a non-interactive
    matplotlib backend."""
    import runpy

    pytest.importorskip("matplotlib")
    missing = _missing(example.read_text())
    if missing:
        pytest.skip(f"{example.name} needs {', '.join(missing)}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    runpy.run_path(str(example), run_name="__main__")
