# make demo: set up .venv (from pyproject.toml) and run the demo on the embedded data set.
# make test: set up .venv and run the default test suite (slow tests deselected).
# make lint: ruff check, ruff format --check and mypy on the package (CI runs it before the tests).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-all bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fastkpca demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest

test-all: $(STAMP)
	$(VENV)/bin/python -m pytest -m ''

bench: $(STAMP)
	$(VENV)/bin/fastkpca bench --quick

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy src

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
