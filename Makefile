# `make test` and `make demo` set up .venv on first use (fresh machine: Python >= 3.10, gcc/g++, make).
# The venv's Python is the newest one the current dependency line is checked on (3.13, then 3.12: Stan 2.39 and
# ArviZ 1.x; scripts/newest-python), else python3, with a one-line note of what that gives (scripts/venv-line).
# PYTHON=... overrides it, e.g. `make test VENV=.venv311 PYTHON=python3.11` for the arviz 0.23 / Stan 2.35 line.
VENV ?= .venv
PYTHON ?= $(shell scripts/newest-python)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stan-dp-installed
NOTE := $(PY) scripts/venv-line $(VENV) "$(PYTHON)" $(origin PYTHON)

.PHONY: test test-quick lint demo install docs docs-install clean

# The test environment is installed without byte-compiling every installed module (--no-compile): a test process
# compiles only the modules it imports, when it first imports them (Ray, pandas and Sphinx's trees are mostly never
# imported). Measured on two cores: `make install` 77 s -> 44 s of wall time, 64 -> 29 s of CPU.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(NOTE)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e ".[test,ray,lint,tables]"
	touch $(STAMP)

install: $(STAMP)

# `make demo` needs the package alone (no test, Ray, lint or Parquet extras): a first demo downloads and installs
# only that, without byte-compiling every installed module (--no-compile: the modules the demo imports are compiled
# when first imported; measured: 28 s less CPU for the install, 7 s more for the first import). A venv that
# `make test` / `make install` set up already serves as it is.
DEMO_STAMP := $(VENV)/.stan-dp-demo-installed
$(DEMO_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(NOTE)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e .
	touch $(DEMO_STAMP)

# Test processes side by side (pytest-xdist; each test file stays in one process, so its module fixtures are
# built once; compiled models are shared through the on-disk cache). TEST_JOBS=0 runs everything in this process.
TEST_JOBS ?= 2
XDIST := $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)

# The full suite (what CI runs on the newest dependency line; the 3.11 line runs test-quick).
test: $(STAMP)
	@$(NOTE)
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS) tests

# The quick tier: every module, no statistical or long test.
test-quick: $(STAMP)
	@$(NOTE)
	$(PY) -m pytest -q -m "not slow" $(XDIST) $(PYTEST_ARGS) tests

# ruff (mistakes, not style) on the package and the tests; mypy on stan_dp/privacy, samplers, phases, methods and run,
# where every function must be annotated (disallow_untyped_defs). Both are configured in pyproject.toml.
lint: $(STAMP)
	$(PY) -m ruff check stan_dp tests
	$(PY) -m mypy

demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	@$(NOTE)
	$(VENV)/bin/stan-dp demo

# The documentation site (Sphinx + MyST, furo theme) into docs/_build/html; any warning fails the build.
DOCS_STAMP := $(VENV)/.stan-dp-docs-installed
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --no-compile -e ".[docs]"
	touch $(DOCS_STAMP)

docs-install: $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) -m sphinx -E -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: open docs/_build/html/index.html"

clean:
	rm -rf $(VENV) build *.egg-info docs/_build docs/_generated
