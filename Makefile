# make demo: set up .venv with what the demo needs (the core dependencies of pyproject.toml: no
#   torch, dask, pyarrow, matplotlib) and run the demo on the embedded data set (the plot needs
#   matplotlib: `pip install -e '.[plot]'`, or `make test` first, which installs it).
# make test: set up .venv with the test extra and run the default test suite (slow tests
#   deselected).  Each set-up has its own stamp, so `make demo` then `make test` (or the other
#   way round) in one .venv installs what each needs.
# make test-other-cpu: the default suite again as on another CPU (.ci/other-cpu: numpy's widest
#   SIMD paths off, an older OpenBLAS core type), so a CPU-dependent test fails in CI.
# make lint: ruff check, ruff format --check and mypy on the package (CI runs it before the tests).
# make docs: the documentation site (Sphinx + MyST, strict: -n -W) into build/docs/html.
# make wheel-check: build the sdist and wheel, install the wheel in a clean venv outside the
#   checkout and run `fastkpca demo` there (no display); the source tree must be left unchanged.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.test-stamp
CORE_STAMP := $(VENV)/.core-stamp
DOCS_STAMP := $(VENV)/.docs-stamp
DOCS_OUT := build/docs/html

.PHONY: demo test test-other-cpu test-all bench lint docs clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# the package and its core dependencies only
$(CORE_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e .
	touch $(CORE_STAMP)

# the package with the test extra (which includes the core dependencies)
$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	touch $(STAMP) $(CORE_STAMP)

demo: $(CORE_STAMP)
	$(VENV)/bin/fastkpca demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest

test-other-cpu: $(STAMP)
	.ci/other-cpu $(VENV)/bin/python -m pytest -q

test-all: $(STAMP)
	$(VENV)/bin/python -m pytest -m ''

bench: $(STAMP)
	$(VENV)/bin/fastkpca bench --quick

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy src

$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(VENV)/bin/python -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

# -n: every reference must resolve (docs/conf.py exempts only other projects' names);
# -W --keep-going: any warning fails the build, after reporting all of them; -E: no stale pages.
docs: $(DOCS_STAMP)
	$(VENV)/bin/sphinx-build -E -n -W --keep-going -q -b html docs $(DOCS_OUT)
	@echo "site: $(DOCS_OUT)/index.html"

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache docs/_generated
	rm -rf docs/gallery

.PHONY: wheel-check
wheel-check: $(STAMP)
	PYTHON=$(VENV)/bin/python .ci/wheel-check
