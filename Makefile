# Two entry points on a fresh machine: `make run` (the main job) and `make test` (lint, types, tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export CUDA_HOME ?= /usr/local/cuda

.PHONY: run test lint clean

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

test: lint
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=15

clean:
	rm -rf $(VENV)
