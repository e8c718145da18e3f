"""Package metadata: one version, the licence, citation, changelog and show_versions()."""

import importlib.metadata
from pathlib import Path

import pytest
import yaml

import fastkpca

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_is_written_once():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    dynamic = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "fastkpca.__version__"}
    assert importlib.metadata.version("fastkpca") == fastkpca.__version__


def test_spdx_licence_and_its_file():
    project = PYPROJECT["project"]
    assert project["license"] == "BSD-3-Clause"  # PEP 639: an SPDX string, not a table
    assert project["license-files"] == ["LICENSE"]
    # a licence classifier next to an SPDX expression is an error for PEP 639 build tools
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "fastkpca developers" in text
    assert {"Homepage", "Documentation", "Repository", "Issues", "Changelog"} <= set(
        project["urls"]
    )


def test_citation_names_this_version_and_the_five_papers():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["version"] == fastkpca.__version__
    assert cff["license"] == "BSD-3-Clause"
    assert cff["repository-code"] == PYPROJECT["project"]["urls"]["Repository"]
    firsts = sorted(ref["authors"][0]["family-names"] for ref in cff["references"])
    assert firsts == ["Achlioptas", "Ghashami", "Kingravi", "Musco", "Sriperumbudur"]
    assert all(ref["title"] and ref["year"] for ref in cff["references"])


def test_changelog_has_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text and f"## [{fastkpca.__version__}]" in text


def test_show_versions(capsys):
    info = fastkpca.show_versions(as_dict=True)
    assert info["dependencies"]["fastkpca"] == fastkpca.__version__
    import numpy
    import sklearn

    assert info["dependencies"]["numpy"] == numpy.__version__
    assert info["dependencies"]["scikit-learn"] == sklearn.__version__
    assert info["system"]["python"].split()[0] == ".".join(
        map(str, __import__("sys").version_info[:3])
    )
    assert any(pool["user_api"] == "blas" for pool in info["threadpools"])
    assert fastkpca.show_versions() is None
    out = capsys.readouterr().out
    for word in ("System:", "python:", "fastkpca:", "numpy:", "scikit-learn:", "user_api: blas"):
        assert word in out, word
    assert "show_versions" in fastkpca.__all__
