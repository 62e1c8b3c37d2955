# The commands: `make run` (set up + run the default pipeline), `make test` (set up + every test) and `make check`
# (set up + the fast tier of the tests: docs/testing.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run full test check style setup lint reports rehearsal clean-results

$(STAMP): pyproject.toml envs/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# pyproject.toml's requires-python, before pip: on an older Python, pip's resolver names a dependency conflict
	@$(BIN)/python -c 'import re, sys; need = re.search(r"requires-python = \">=([\d.]+)", open("pyproject.toml")\
	.read())[1]; sys.exit(sys.version_info < tuple(map(int, need.split("."))) and f"intact needs Python {need} or \
	newer; $(VENV) has {sys.version.split()[0]}: rm -rf $(VENV) and run make with PYTHON=python{need} (or newer)")'
	$(BIN)/pip install --quiet --disable-pip-version-check -c envs/constraints.txt -e '.[workflow,dev]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake

full: $(STAMP)
	$(BIN)/snakemake full

# Rebuild every table and figure from stored results only (e.g. a results/ tree copied from a cluster):
# only aggregation rules are allowed, so nothing is ever trained or evaluated. --forcerun, not --forceall:
# in a workflow with a checkpoint (the tune study's) Snakemake keeps every rule in the DAG and --forceall
# would then force training too; --forcerun forces only the allowed rules.
REPORT_RULES := reports collect_run report_default_run report_study_main report_study_integration report_study_ablation report_study_sensitivity
PAPER_RULES := paper_tables report_paper_tables report_paper_figures
reports: $(STAMP)
	$(BIN)/snakemake reports paper_tables --forcerun $(REPORT_RULES) $(PAPER_RULES) --allowed-rules $(REPORT_RULES) $(PAPER_RULES)

# A dress rehearsal of the paper configs (docs/cluster.md, "Rehearse first"): each one's whole DAG at toy scale in
# rehearsal/<name>/, then every output read (intact rehearse). REHEARSE=imagenet_r rehearses one;
# SNAKEMAKE_ARGS="--profile slurm" sends the jobs to the cluster.
REHEARSE ?=
SNAKEMAKE_ARGS ?=
rehearsal: $(STAMP)
	$(BIN)/intact rehearse $(REHEARSE) -- $(SNAKEMAKE_ARGS)

# 3 workers on the 2-core reference machine: the SLURM end-to-end test waits on its cluster for most of its
# ~150 s, and a third worker uses that idle core (353-397 s against 399 s with 2:
# docs/log/2026-11-27-test-suite-timings.md).
# Whole files per worker (--dist loadfile): the SLURM tests (one cluster, /etc/slurm, munge's socket)
# stay on one worker, and a module-scoped fixture (a tiny pipeline run, an MLflow server) is built once.
# (Not --dist loadgroup: with pytest 9 xdist 3.8's xdist_group marks no longer group anything.) The slowest
# files go first (tests/conftest.py: SLOW_FIRST). PYTEST_WORKERS=0 runs in one process.
# --durations=15: the 15 slowest set-ups, calls and tear-downs, against the budget in docs/testing.md.
PYTEST_WORKERS ?= 3
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

# The fast tier (docs/testing.md): unit tests and workflow dry runs, no training, no workflow job, no server.
# 2 workers: nothing waits on a cluster here, and each worker pays the imports once.
CHECK_WORKERS ?= 2
check: style
	$(BIN)/python -m pytest -q -m "not slow" -n $(CHECK_WORKERS) --dist loadfile --no-loadscope-reorder --durations=10

# ruff (pyproject.toml [tool.ruff]) over src/, tests/, tools/ and workflow/scripts/: offline, under a second
style: $(STAMP)
	$(BIN)/ruff check src tests tools workflow/scripts

lint: $(STAMP)
	$(BIN)/snakemake --lint

clean-results:
	rm -rf rehearsal results/data results/backbones results/runs results/tables results/figures results/logs results/timings
