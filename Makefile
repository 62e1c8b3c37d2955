# The two commands: `make run` (set up + run the default pipeline) and `make test` (set up + tests).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test setup lint report clean-results

$(STAMP): pyproject.toml envs/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c envs/constraints.txt -e '.[workflow,dev]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/snakemake --lint

clean-results:
	rm -rf results/data results/backbones results/runs results/tables results/figures results/logs results/timings
