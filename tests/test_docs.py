"""The documentation tells the truth: its code runs and its figures exist.

The ``python`` code blocks of ``docs/quickstart.md`` run in order in one namespace (they assert
their own claims against scikit-learn and ExactKPCA); every figure a page embeds as
``![...](../figures/<file>)`` resolves through ``docs/figures`` (a relative symlink to
``benchmarks/results``) to a committed file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_quickstart_code_blocks_run():
    blocks = _python_blocks(DOCS / "quickstart.md")
    assert len(blocks) >= 5
    namespace: dict = {}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/quickstart.md, python block {i + 1}", "exec"), namespace)
        except Exception as exc:  # name the failing block in the report
            pytest.fail(f"docs/quickstart.md python block {i + 1} failed: {exc!r}\n{block}")


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
