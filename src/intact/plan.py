"""Config -> runs -> files: every target of the workflow, spelled in one place (no torch, no snakemake).

The workflow's targets (``all``, ``study_<name>``, ``full``, ``paper_tables``, ``reports``), the tracking
markers and the inputs of the report rules are all built here from the config, so no rule writes a run
folder or a list of files by hand. The run folder itself is spelled once, in :mod:`intact.paths`.

A set of runs is :data:`Runs`: ``{benchmark: {method: seeds}}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from collections.abc import Callable, Iterable, Mapping, Sequence

from intact.config import ConfigError, benchmark_config, missing_data, missing_weights, resolve_run, tracking_config
from intact.paths import RESULTS, marker_path, run_dir, task_dir
from intact.rehearsal import made_backbones, synthetic_benchmarks
from intact.settings import RunSection, build_dataclass
from intact.settings.experiments import missing_experiment_inputs
from intact.studies import Study, expand_studies
from intact.tune import TuneStudy, expand_tune

#: benchmark -> method -> seeds
Runs = dict[str, dict[str, tuple[int, ...]]]

#: what a run writes beside its task folders, and what each task folder holds
RUN_FILES = ("R.csv", "metrics.json")
TASK_FILES = ("state.safetensors", "hypercube.safetensors", "train.json", "eval.json")

#: the default run's report (target ``all``: ``run.methods`` x ``run.seeds``; not a study)
DEFAULT_RUN_REPORT = {
    "csv": f"{RESULTS}/tables/{{benchmark}}/default_run.csv",
    "md": f"{RESULTS}/tables/{{benchmark}}/default_run.md",
    "paired": f"{RESULTS}/tables/{{benchmark}}/default_run_paired.csv",  # InTAct's gain, seed by seed
    "plot": f"{RESULTS}/figures/{{benchmark}}/default_run_aa_evolution.png",
}
#: a benchmark's picture of its tasks (written when its data is prepared)
DOMAINS_FIGURE = f"{RESULTS}/figures/{{benchmark}}/domains.png"

#: the tune study (intact.tune): a search's choice (a checkpoint of the workflow) and the study's report
TUNE_CHOICE = f"{RESULTS}/tune/{{benchmark}}/{{tuned}}/choice.json"
TUNE_REPORT = {
    "csv": f"{RESULTS}/tables/{{benchmark}}/study_tune.csv",
    "md": f"{RESULTS}/tables/{{benchmark}}/study_tune.md",
    "search": f"{RESULTS}/tables/{{benchmark}}/study_tune_search.csv",
    "paired": f"{RESULTS}/tables/{{benchmark}}/study_tune_paired.csv",
}

#: the paper's tables (built by intact.report.paper_tables), the extra CSVs of their blocks, its figures
PAPER_TABLES = ("main", "ablation", "integration", "hyperparameters", "efficiency")
TABLE_BLOCKS = {"main": ("main_paired",), "integration": ("integration_paired",)}
PAPER_FIGURES = ("aa_evolution", "sensitivity", "certificate", "hypercube", "feat_gate")
TABLE_FORMATS = ("csv", "md", "tex")
FIGURE_FORMATS = ("png", "pdf")


def report_files(study: str, spec: Mapping[str, Any]) -> dict[str, str]:
    """The report files of ``study`` as ``{output name: path with {benchmark}}``: ``study_<name>.*``."""
    tables = f"{RESULTS}/tables/{{benchmark}}/study_{study}"
    figures = f"{RESULTS}/figures/{{benchmark}}/study_{study}"
    out = {"csv": f"{tables}.csv", "md": f"{tables}.md"}
    if study == "main":
        out["paired"] = f"{tables}_paired.csv"  # InTAct's gains, seed by seed
        out["plot"] = f"{figures}_aa_evolution.png"
    elif study == "sensitivity":
        out["figure"] = f"{figures}.png"
        out.update({f"figure_{key}": f"{figures}_{key}.png" for key in spec["grid"]})
    return out


def paper_table_file(name: str, ext: str) -> str:
    """One file of a paper table (``name``: a table of :data:`PAPER_TABLES` or a block of :data:`TABLE_BLOCKS`)."""
    return f"{RESULTS}/tables/paper/{name}.{ext}"


def paper_figure_file(figure: str, benchmark: str, ext: str) -> str:
    """One file of a paper figure of ``benchmark`` (``"{benchmark}"`` gives the rule's output pattern)."""
    return f"{RESULTS}/figures/paper/{figure}_{benchmark}.{ext}"


def paper_table_files() -> list[str]:
    """Every paper table in every format, and the CSVs of their blocks."""
    files = [paper_table_file(t, e) for t in PAPER_TABLES for e in TABLE_FORMATS]
    return files + [paper_table_file(b, "csv") for t in PAPER_TABLES for b in TABLE_BLOCKS.get(t, ())]


def merge_runs(parts: Iterable[Runs]) -> Runs:
    """The union of several sets of runs (a run in two of them is one run; seeds are united, sorted)."""
    merged: dict[str, dict[str, set[int]]] = {}
    for runs in parts:
        for b, methods in runs.items():
            for m, seeds in methods.items():
                merged.setdefault(b, {}).setdefault(m, set()).update(seeds)
    return {b: {m: tuple(sorted(s)) for m, s in methods.items()} for b, methods in merged.items()}


@dataclass
class Plan:
    """The runs a config declares and the files that every target of the workflow consists of."""

    cfg: Mapping[str, Any]
    _num_tasks: dict[str, int] = field(init=False, default_factory=dict, repr=False)

    @cached_property
    def studies(self) -> dict[str, Study]:
        """The declared studies, expanded into runs (intact.studies)."""
        return expand_studies(self.cfg)

    @cached_property
    def tune(self) -> TuneStudy | None:
        """The declared ``studies.tune`` (intact.tune), or None."""
        return expand_tune(self.cfg)

    @cached_property
    def tracking(self) -> bool:
        """Whether finished runs are logged to MLflow (``tracking.enabled``)."""
        return tracking_config(self.cfg).enabled

    @cached_property
    def run(self) -> RunSection:
        """The ``run`` section, typed: what target ``all`` runs."""
        return build_dataclass(RunSection, self.cfg["run"], "run")

    @property
    def benchmarks(self) -> list[str]:
        """The benchmarks every target runs on (``run.benchmarks``)."""
        return list(self.run.benchmarks)

    def num_tasks(self, benchmark: str) -> int:
        if benchmark not in self._num_tasks:
            self._num_tasks[benchmark] = benchmark_config(self.cfg, benchmark).num_tasks
        return self._num_tasks[benchmark]

    # -- runs ---------------------------------------------------------------------------------------

    def default_runs(self) -> Runs:
        """The runs of target ``all``: ``run.methods`` x ``run.seeds`` on every benchmark."""
        return {b: {m: self.run.seeds for m in self.run.methods} for b in self.benchmarks}

    def study_runs(self, study: str) -> Runs:
        s = self.studies[study]
        return {b: {m: s.seeds for m in s.methods} for b in self.benchmarks}

    def declared_runs(self) -> Runs:
        """Every run the config declares: the default run and all studies."""
        return merge_runs([self.default_runs(), *(self.study_runs(s) for s in self.studies)])

    def requested_runs(self, targets: Iterable[str]) -> Runs:
        """The runs that the named targets themselves produce (none for ``paper_tables`` or a file)."""
        targets = set(targets) or {"all"}
        parts = [self.default_runs()] if targets & {"all", "full"} else []
        parts += [self.study_runs(s) for s in self.studies if targets & {"full", f"study_{s}"}]
        return merge_runs(parts)

    def recollected(self, targets: Iterable[str], exists: Callable[[str], bool]) -> list[str]:
        """The ``metrics.json`` and ``R.csv`` that target ``reports`` (if named) writes again: those of the stored
        runs of each report it rebuilds (:meth:`stored_reports`; ``exists``: which files are there). A paper table
        built beside it waits for them, never reading a run's record while it is rewritten."""
        if "reports" not in set(targets):
            return []
        runs = merge_runs([runs for runs, _ in self._stored_parts(exists)])
        return [f"{run_dir(b, m, s)}/{name}" for b, m, s in each_run(runs) for name in ("metrics.json", "R.csv")]

    def target_runs(self) -> dict[str, Runs]:
        """The runs each named target trains (``study_tune``: its search points and baselines, before any
        choice; ``full``: every other target's)."""
        out = {"all": self.default_runs(), **{f"study_{s}": self.study_runs(s) for s in self.studies}}
        if self.tune is not None:
            out["study_tune"] = self.tune_runs()
        out["full"] = merge_runs(list(out.values()))
        return out

    def target_inputs(self, target: str) -> tuple[dict[str, list[str]], list[str]]:
        """(backbone -> the runs of ``target`` that train on it, the benchmarks they read): whose weights files and
        data a real run of ``target`` may read. A target that trains nothing (:data:`TRAINS_NOTHING`) reads none;
        an unknown target is a ConfigError naming the known ones."""
        runs = self.target_runs()
        if target in TRAINS_NOTHING:
            return {}, []
        if target not in runs:
            known = ", ".join([*runs, *TRAINS_NOTHING])
            raise ConfigError(f"unknown target {target!r}; this config's targets: {known}")
        return self.backbones(runs[target]), sorted(runs[target])

    def backbones(self, runs: Runs) -> dict[str, list[str]]:
        """Backbone name -> the runs (``benchmark/method``) of ``runs`` that train on it."""
        out: dict[str, list[str]] = {}
        for b, methods in runs.items():
            for m in methods:
                name = resolve_run(self.cfg, b, m, 0).backbone.name
                out.setdefault(name, []).append(f"{b}/{m}")
        return out

    def tune_runs(self) -> Runs:
        """The tune study's runs known before any choice: every search point (validation split, selection
        seeds) and every baseline (test split, final seeds), on the study's benchmarks."""
        t = self.tune
        if t is None:
            return {}
        return merge_runs([{b: {**t.search_runs(), **t.baseline_runs()} for b in t.benchmarks}])

    def tune_final_runs(self, chosen: Callable[[str, str], str]) -> Runs:
        """The chosen points on the test split over the final seeds; ``chosen(benchmark, run)`` is the
        name a search chose (the checkpoint's record)."""
        t = self.tune
        return {b: {chosen(b, s.run): t.seeds for s in t.searches} for b in t.benchmarks} if t else {}

    def tune_choices(self) -> list[str]:
        """Every search's choice record (the checkpoint outputs)."""
        t = self.tune
        return [TUNE_CHOICE.format(benchmark=b, tuned=s.run) for b in t.benchmarks for s in t.searches] if t else []

    @cached_property
    def tune_finals(self) -> dict[tuple[str, str], str]:
        """(benchmark, a search point's test-split name) -> its search's choice record, which the tracking of the
        chosen one reads (:func:`intact.tracking.record.tune_choice`); not for a run the default run or a study
        declares too (its tracking does not wait for the tune)."""
        t, declared = self.tune, self.declared_runs()
        return {(b, name): TUNE_CHOICE.format(benchmark=b, tuned=s.run) for b in (t.benchmarks if t else ())
                for s in t.searches for name in s.test_names if name not in declared.get(b, {})}

    def tune_static_targets(self) -> list[str]:
        """What target ``study_tune`` asks for before any choice (so every search is scheduled at once): the
        search points, the baselines, their markers and every choice record."""
        runs = self.tune_runs()
        return self.run_files(runs) + self.tune_choices() + self.markers(runs)

    def tune_targets(self, chosen: Callable[[str, str], str]) -> list[str]:
        """Target ``study_tune``: the search points, the baselines, the chosen points' final runs, the
        choices, the report of each benchmark and the tracking markers."""
        if self.tune is None:
            return []
        runs = merge_runs([self.tune_runs(), self.tune_final_runs(chosen)])
        reports = [f.format(benchmark=b) for b in self.tune.benchmarks for f in TUNE_REPORT.values()]
        return self.run_files(runs) + self.tune_choices() + reports + self.markers(runs)

    # -- the files of runs --------------------------------------------------------------------------

    def task_files(self, benchmark: str, method: str, seed: int | str, name: str) -> list[str]:
        """``name`` in every task folder of a run."""
        return [f"{task_dir(benchmark, method, seed, t)}/{name}" for t in range(self.num_tasks(benchmark))]

    def run_files(self, runs: Runs) -> list[str]:
        """Every artifact of the runs. Task files are listed too (not only R.csv), so that a deleted task
        folder is redone - Snakemake would otherwise treat it as a disposable intermediate."""
        files = []
        for b, m, s in each_run(runs):
            files += [f"{run_dir(b, m, s)}/{f}" for f in RUN_FILES]
            files += [f for name in TASK_FILES for f in self.task_files(b, m, s, name)]
        return files

    def record_files(self, runs: Runs) -> list[str]:
        """The records every table, figure and choice reads (:func:`intact.results.read_run`): ``metrics.json``,
        ``R.csv``, and every task's ``eval.json`` and ``train.json``."""
        return [f for b, m, s in each_run(runs)
                for f in [f"{run_dir(b, m, s)}/metrics.json", f"{run_dir(b, m, s)}/R.csv",
                          *(f"{task_dir(b, m, s, t)}/{name}" for t in range(self.num_tasks(b))
                            for name in ("eval.json", "train.json"))]]

    def stored_records(self, exists: Callable[[str], bool]) -> list[str]:
        """The records (:meth:`record_files`) of every declared run whose ``metrics.json`` exists: what the
        paper's tables read whatever the target (a digest of them is a param of the paper rules)."""
        stored = [(b, m, s) for b, m, s in each_run(self.declared_runs()) if exists(f"{run_dir(b, m, s)}/metrics.json")]
        return [f for b, m, s in stored for f in self.record_files({b: {m: (s,)}}) if exists(f)]

    def markers(self, runs: Runs) -> list[str]:
        """The MLflow tracking markers of the runs ([] when tracking is off)."""
        return [marker_path(b, m, s) for b, m, s in each_run(runs)] if self.tracking else []

    # -- targets ------------------------------------------------------------------------------------

    def study_reports(self, study: str, benchmark: str) -> list[str]:
        """The report files of one study on one benchmark (see workflow/rules/studies.smk)."""
        return [f.format(benchmark=benchmark) for f in report_files(study, self.studies[study].spec).values()]

    def default_reports(self, benchmark: str) -> list[str]:
        return [f.format(benchmark=benchmark) for f in DEFAULT_RUN_REPORT.values()]

    def paper_targets(self) -> list[str]:
        """Every paper table, and every paper figure of every benchmark."""
        figures = [paper_figure_file(f, b, e) for b in self.benchmarks for f in PAPER_FIGURES for e in FIGURE_FORMATS]
        return paper_table_files() + figures

    def default_targets(self) -> list[str]:
        """The default run: its runs, their markers, its report and each benchmark's domains picture."""
        runs = self.default_runs()
        reports = [f for b in self.benchmarks for f in [*self.default_reports(b), DOMAINS_FIGURE.format(benchmark=b)]]
        return self.run_files(runs) + reports + self.markers(runs)

    def all_targets(self) -> list[str]:
        """Target ``all``: the default run and the paper's tables and figures."""
        return self.default_targets() + self.paper_targets()

    def study_targets(self, study: str) -> list[str]:
        """Everything a study produces on every benchmark: its runs (task files included), reports, markers."""
        runs = self.study_runs(study)
        reports = [f for b in self.benchmarks for f in self.study_reports(study, b)]
        return self.run_files(runs) + reports + self.markers(runs)

    def full_targets(self) -> list[str]:
        """Target ``full``: the default run, every declared study, and the paper's tables and figures."""
        return self.default_targets() + [f for s in self.studies for f in self.study_targets(s)] + self.paper_targets()

    def stored_reports(self, exists: Callable[[str], bool]) -> list[str]:
        """Every default-run and study report whose runs' metrics are all present (``exists``): what
        ``snakemake reports`` rebuilds from a results/ tree copied off a cluster."""
        return [f for _, reports in self._stored_parts(exists) for f in reports]

    def _stored_parts(self, exists: Callable[[str], bool]) -> list[tuple[Runs, list[str]]]:
        """(runs, their reports) of the default run and each study on each benchmark, where every run's metrics
        are present."""
        out = []
        for b in self.benchmarks:
            parts = [(self.run.methods, self.run.seeds, self.default_reports(b))]
            parts += [(s.methods, s.seeds, self.study_reports(name, b)) for name, s in self.studies.items()]
            out += [({b: {m: tuple(seeds) for m in methods}}, reports) for methods, seeds, reports in parts
                    if all(exists(f) for f in self.metrics_files(b, methods, seeds))]
        return out

    @staticmethod
    def metrics_files(benchmark: str, methods: Sequence[str], seeds: Sequence[int]) -> list[str]:
        """``metrics.json`` of each (method, seed) run of a benchmark."""
        return [f"{run_dir(benchmark, m, s)}/metrics.json" for m in methods for s in seeds]


#: the targets that train nothing: they read stored results or no benchmark at all
TRAINS_NOTHING = ("paper_tables", "reports", "study_toy", "study_drift")


def check_target_files(cfg: Mapping[str, Any], target: str, prepared: Callable[[str], bool]) -> str:
    """What a real run of ``target`` checks before its first job, without the DAG: the weights file of every backbone
    its runs train on (that it exists and fits its model: :func:`intact.config.missing_weights`), and the data roots
    of every benchmark they read that is not prepared yet (``prepared(name)``), and an experiment target's own files
    (:func:`~intact.settings.experiments.missing_experiment_inputs`). A ConfigError names the first missing
    or unfit file and a run that needs it; else a line says what was checked and which declared files this target
    never reads. (The workflow itself refuses only the files of the jobs it will run, so a target whose runs are all
    finished needs none.)"""
    for message in missing_experiment_inputs(cfg).get(target.removeprefix("study_"), []):
        raise ConfigError(f"config: {message} (needed by target {target})")
    plan = Plan(cfg)
    backbones, benchmarks = plan.target_inputs(target)
    weights, data = missing_weights(cfg, check_fit=True), missing_data(cfg, prepared)
    for name, users in backbones.items():
        if name in weights:
            raise ConfigError(f"config: {weights[name]} (needed by target {target}, e.g. run {users[0]})")
    for b in benchmarks:
        if data.get(b):
            raise ConfigError(f"config: {data[b][0]} (needed by target {target} to prepare {b!r})")
    unread = sorted(set(cfg["backbones"]) - set(backbones))
    made = [n for n in [*made_backbones(cfg), *synthetic_benchmarks(cfg)] if n in backbones or n in benchmarks]
    text = (f"target {target}: checked the weights of {', '.join(backbones) or 'no backbone'} and the data of "
            f"{', '.join(benchmarks) or 'no benchmark'}")
    text += f"; made by the rehearsal: {', '.join(made)}" if made else ""
    return text + (f"; not read by this target: {', '.join(unread)}" if unread else "")


def each_run(runs: Runs) -> Iterable[tuple[str, str, int]]:
    """(benchmark, method, seed) of every run."""
    for b, methods in runs.items():
        for m, seeds in methods.items():
            for s in seeds:
                yield b, m, s
