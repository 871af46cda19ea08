# One entry point for a newcomer: `make demo`, `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-slow lint bench docs notebooks clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/jaxqueue demo

test: $(STAMP)
	$(PY) -m pytest -n 2 -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check jaxqueue tests benchmarks

bench: $(STAMP)
	$(PY) -m benchmarks.run

# The docs site (mkdocs.yml, docs/): API and CLI pages generated from the code, notebooks
# rendered with their stored outputs; --strict fails on any warning or broken link.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

# Execute every notebook at its full size and store its outputs and figures in place
# (notebooks/README.md lists the sizes and times); the test suite runs them in fast mode.
notebooks: $(STAMP)
	$(PY) tools/run_notebooks.py

clean:
	rm -rf $(VENV) .pytest_cache site .cache
