# `make test` and `make demo` set up .venv on first use (fresh machine: Python >= 3.10, gcc/g++, make).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stan-dp-installed

.PHONY: test demo install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

demo: $(STAMP)
	$(VENV)/bin/stan-dp demo

clean:
	rm -rf $(VENV) build *.egg-info
