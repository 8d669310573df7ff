# Two entry points on a fresh machine: `make run` (the main job) and `make test` (lint, types, tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export CUDA_HOME ?= /usr/local/cuda

.PHONY: run test lint browser clean

$(BIN)/kernelarena: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.dev: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[dev,ray]"
	touch $@

run: $(BIN)/kernelarena
	$(BIN)/kernelarena run

lint: $(VENV)/.dev
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

# The report's browser tests drive the system's Chromium (Playwright's own download needs the
# network): Debian's package, installed here when missing and we may (root, or sudo).
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "no chromium and no apt-get: install Chromium for the report's browser tests"; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium); \
	elif command -v sudo >/dev/null 2>&1; then \
		sudo apt-get install -y -q chromium || (sudo apt-get update -q && sudo apt-get install -y -q chromium); \
	else echo "no chromium and no root to install it: apt-get install chromium"; fi

# Tests that load the machine on purpose run apart, so that their burners slow no other test.
test: lint browser
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=15 -m "not loaded"
	# apply's Python hot path, which stands alone where no C compiler is (above: the compiled one)
	$(BIN)/pytest -q -n 2 --dist loadfile --apply-fastpath=python tests/dispatch/test_apply.py \
		tests/dispatch/test_guards.py tests/dispatch/test_ops.py tests/dispatch/test_flags.py
	$(BIN)/pytest -q -n 0 -m loaded

clean:
	rm -rf $(VENV)
