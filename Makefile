# One entry point for a newcomer: `make demo`, `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
VENV_MIN ?= .venv-min
# A fast subset of the suite for the minimum versions (ci/constraints-min.txt).
MIN_TESTS := tests/distributions/test_laws.py tests/stats/test_ci.py tests/pools/test_core.py \
	tests/mjqm/test_step.py tests/mjqm/test_workload.py tests/scenarios/test_files.py \
	tests/core/test_sharding_internal.py tests/networks/test_networks.py tests/mjqm/test_exact.py \
	tests/cli/test_bad_input.py tests/core/test_tables.py

.PHONY: setup demo test test-slow test-min lint style bench docs notebooks clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/jaxqueue demo

test: $(STAMP)
	$(PY) -m pytest -n 2 -q --durations=15

test-slow: $(STAMP)
	$(PY) -m pytest -n 2 -q -m slow --durations=20

# The dependency floors: a fresh venv with the minimum versions, then the fast subset.
test-min:
	rm -rf $(VENV_MIN)
	$(PYTHON) -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_MIN)/bin/python -m pip install --quiet -c ci/constraints-min.txt -e ".[test]"
	$(VENV_MIN)/bin/python -m pytest -n 2 -q -p no:cacheprovider $(MIN_TESTS) \
		-k "not vmap_over_loads_does_not_hang"

lint: $(STAMP)
	$(VENV)/bin/ruff check jaxqueue tests benchmarks

# The package's prose and structure: no date, issue number or timing in its comments, short
# module docstrings, a reason on each lazy import, no module-level cache (plain Python).
style:
	$(PYTHON) tools/check_style.py --summary

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
	rm -rf $(VENV) $(VENV_MIN) .pytest_cache site .cache
