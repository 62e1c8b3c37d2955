"""The ``tune`` study: a declared search on a validation split carved from the training data, a choice
by mean validation AA, and the chosen point on the test split (docs/lambda-search.md).

::

    studies:
      tune:
        benchmarks: [digits_5]       # null: run.benchmarks
        seeds: [0, 1, 2, 3, 4]       # the chosen points and their baselines, on the test split
        selection_seeds: [0, 1]      # every search point, on the validation split
        tie: first                   # first | min_forgetting (points within `tolerance` of the best tie)
        tolerance: 0.0
        searches:
          - {run: coda_p+intact, baseline: coda_p, grid: {lambda_feat: [3, 30], lambda_intdrift: [1e-3, 1e-2]}}
          - {run: ewc, baseline: finetune,
             random: {points: 4, seed: 0, space: {methods.ewc.lambda_ewc: {log_uniform: [1, 1000]}}}}

A search point is an ordinary run whose name carries its settings and ``run.eval_split=val``
(``coda_p+intact@lambda_feat=3,lambda_intdrift=1e-3,run.eval_split=val``): it trains on the training
split minus the validation part and is evaluated on the validation part, so no test image reaches it.
The chosen point runs under the same name without ``run.eval_split`` - the full training split, the
test split - like any other run. :func:`select` reads validation metrics only. No torch here.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import statistics
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator, Mapping, Sequence

from intact.naming import MethodNameError, baseline, format_value, misspelled, with_overrides
from intact.settings import ConfigError, build_dataclass, plain
from intact.settings.studies import DERIVED_BASELINE, Distribution, RandomSearch, TuneSearch, TuneSection
from intact.studies import default_seeds

#: the name suffix of a search point (intact.config.RUN_KEYS allows it)
VAL_OVERRIDE = "run.eval_split=val"
#: significant digits of a random point's values (a readable, name-safe run name)
RANDOM_DIGITS = 2


@dataclass(frozen=True)
class Search:
    """One tuned run: its search points (settings -> name, in declaration order) and what it is compared with."""

    run: str
    baseline: str | None
    points: tuple[tuple[tuple[str, Any], ...], ...]

    def test_name(self, point: Sequence[tuple[str, Any]]) -> str:
        """The run name of ``point`` on the test split (the final runs)."""
        return with_overrides(self.run, [f"{k}={format_setting(v)}" for k, v in point])

    def val_name(self, point: Sequence[tuple[str, Any]]) -> str:
        """The run name of ``point`` on the validation split (a search point)."""
        return with_overrides(self.test_name(point), [VAL_OVERRIDE])

    @property
    def val_names(self) -> list[str]:
        return [self.val_name(p) for p in self.points]

    @property
    def test_names(self) -> list[str]:
        return [self.test_name(p) for p in self.points]


@dataclass(frozen=True)
class TuneStudy:
    """The declared ``studies.tune``."""

    benchmarks: tuple[str, ...]
    seeds: tuple[int, ...]
    selection_seeds: tuple[int, ...]
    tie: str
    tolerance: float
    searches: tuple[Search, ...]

    def search(self, run: str) -> Search:
        return next(s for s in self.searches if s.run == run)

    def search_runs(self) -> dict[str, tuple[int, ...]]:
        """Every search point (validation split) -> the selection seeds."""
        return {n: self.selection_seeds for s in self.searches for n in s.val_names}

    def baseline_runs(self) -> dict[str, tuple[int, ...]]:
        """Every baseline (test split) -> the final seeds."""
        return {s.baseline: self.seeds for s in self.searches if s.baseline}


def format_setting(value: Any) -> str:
    """A value as a name spells it: numbers compactly (intact.naming.format_value), null and booleans as YAML
    writes them, the rest as text."""
    if value is None:
        return "null"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return format_value(float(value))


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[tuple[tuple[str, Any], ...]]:
    """The cartesian product of ``grid`` in declaration order (the last key varies fastest)."""
    keys = list(grid)
    return [tuple(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def _round(value: float) -> float:
    return float(f"{value:.{RANDOM_DIGITS}g}")


def _draw(rng: random.Random, dist: Distribution) -> Any:
    if dist.choice is not None:
        return rng.choice(list(dist.choice))
    lo, hi = dist.uniform if dist.uniform is not None else dist.log_uniform
    value = rng.uniform(lo, hi) if dist.uniform is not None else math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return min(max(_round(value), lo), hi)   # rounding may step past a bound (0.149 -> 0.15)


def random_points(spec: RandomSearch) -> list[tuple[tuple[str, Any], ...]]:
    """``spec.points`` distinct points drawn from ``spec.space`` with ``random.Random(spec.seed)``: the same
    declaration gives the same points on every machine (Python's Mersenne Twister is portable)."""
    rng, space, out = random.Random(spec.seed), spec.space, []
    for _ in range(100 * spec.points):
        point = tuple((k, _draw(rng, space[k])) for k in space)
        if point not in out:
            out.append(point)
        if len(out) == spec.points:
            return out
    raise ValueError(f"studies.tune: cannot draw {spec.points} distinct points from {plain(space)} (rounded to "
                     f"{RANDOM_DIGITS} digits)")


def search_baseline(entry: TuneSearch) -> str | None:
    """What a search's chosen point is compared with: its declared ``baseline`` (null: none); where it declares none
    (:data:`~intact.settings.studies.DERIVED_BASELINE`), for an InTAct run, the same method without InTAct
    (:func:`intact.naming.baseline`)."""
    if entry.baseline != DERIVED_BASELINE:
        return entry.baseline
    try:
        return baseline(entry.run)
    except MethodNameError:
        return None  # a malformed name: validation refuses it, naming where it is declared


def point_problems(entry: TuneSearch, search: Search) -> Iterator[str]:
    """What would make a search's runs other than their names and records say: a number its name spells as another
    (a name keeps 6 significant digits), two points of one name (one run for both), a point whose settings its
    derived baseline lacks (InTAct's gain would be mixed with theirs: :func:`intact.naming.baseline`)."""
    numbers = [(k, v) for point in search.points for k, v in point
               if isinstance(v, (int, float)) and not isinstance(v, bool)]
    for key, value in numbers:
        if misspelled(value):
            yield (f"{key} = {value!r} is spelled {misspelled(value)} in its run's name, another number (a "
                   "name keeps 6 significant digits): round it")
    names = search.val_names
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice:
        yield f"two of its points are one run, {twice!r}: declare each value once"
    for name in search.test_names if entry.baseline == DERIVED_BASELINE and search.baseline else ():
        if baseline(name) != search.baseline:
            yield (f"point {name!r} sets settings outside InTAct that its derived baseline {search.baseline!r} lacks "
                   f"(its own: {baseline(name)!r}); declare the search's baseline")
            return


def expand_search(entry: TuneSearch) -> Search:
    points = grid_points(entry.grid) if entry.grid is not None else random_points(entry.random)
    return Search(run=entry.run, baseline=search_baseline(entry), points=tuple(points))


def tune_section(cfg: Mapping[str, Any]) -> TuneSection | None:
    """The declared ``studies.tune``, typed (None if it is not declared); a search with both or neither of ``grid``
    and ``random`` is a ConfigError naming its run."""
    spec = (cfg.get("studies") or {}).get("tune")
    if spec is None:
        return None
    section = build_dataclass(TuneSection, spec, "studies.tune")
    for entry in section.searches:
        if (entry.grid is None) == (entry.random is None):
            declared = "both" if entry.grid is not None else "neither"
            raise ConfigError(f"config: key 'studies.tune.searches': run {entry.run!r} declares {declared} of 'grid' "
                              "and 'random' (one of the two)")
    return section


def expand_tune(cfg: Mapping[str, Any]) -> TuneStudy | None:
    """The declared ``studies.tune`` (None if it is not declared)."""
    section = tune_section(cfg)
    if section is None:
        return None
    return TuneStudy(**_tune_frame(cfg, section), searches=tuple(map(expand_search, section.searches)))


def _tune_frame(cfg: Mapping[str, Any], spec: TuneSection) -> dict[str, Any]:
    """The fields of the declared ``studies.tune`` but its searches (benchmarks and seeds with their defaults)."""
    return dict(
        benchmarks=tuple(spec.benchmarks or cfg["run"]["benchmarks"]),
        seeds=tuple(spec.seeds or default_seeds(cfg)),
        selection_seeds=tuple(spec.selection_seeds),
        tie=spec.tie,
        tolerance=float(spec.tolerance),
    )


def tune_benchmarks(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """The benchmarks ``studies.tune`` runs on (its ``benchmarks``, else ``run.benchmarks``); none if undeclared."""
    section = tune_section(cfg)
    return _tune_frame(cfg, section)["benchmarks"] if section is not None else ()


def tune_run_count(cfg: Mapping[str, Any]) -> int:
    """How many runs ``studies.tune`` declares on its benchmarks: each search point on the selection seeds, each
    baseline and each chosen point on the final seeds; counted without expanding a grid (a product of lists)."""
    section = tune_section(cfg)
    if section is None:
        return 0
    frame, searches = _tune_frame(cfg, section), section.searches
    points = sum(math.prod(map(len, e.grid.values())) if e.grid is not None else e.random.points for e in searches)
    baselines = len({b for b in map(search_baseline, searches) if b})
    per_benchmark = points * len(frame["selection_seeds"]) + (baselines + len(searches)) * len(frame["seeds"])
    return len(frame["benchmarks"]) * per_benchmark


# ------------------------------------------------------------------------------------------------------
# The choice (a checkpoint of the workflow: the final runs' names depend on it)


def select(search: Search, metrics: Mapping[tuple[str, int], Mapping[str, Any]], seeds: Sequence[int], *,
           tie: str, tolerance: float, fingerprints: Mapping[tuple[str, int], str] | None = None) -> dict[str, Any]:
    """Pick ``search``'s point with the highest validation AA averaged over ``seeds``, and say how decisive
    the pick is.

    ``metrics[(val name, seed)]`` is a search point's ``metrics.json``: only validation-split records are
    accepted, so no test number can reach the choice. Points within ``tolerance`` (AA points) of the best
    mean tie; ``tie`` breaks it: ``first`` (declaration order) or ``min_forgetting`` (lowest mean
    forgetting, then declaration order). ``fingerprints[(val name, seed)]`` (:func:`run_fingerprint`): points
    whose runs are the same on every selection seed are *identical* - the record says so, and a choice among
    identical points is a tie, not a preference (:func:`decisiveness`)."""
    rows = []
    for i, point in enumerate(search.points):
        recs = [metrics[(search.val_name(point), s)] for s in seeds]
        for r in recs:
            if r.get("eval_split") != "val":
                raise ValueError(f"{search.val_name(point)}: metrics with eval_split={r.get('eval_split')!r}; "
                                 "a tuning choice reads validation-split records only")
        aa = [float(r["aa"]) for r in recs]
        forgetting = [float(r["forgetting_max"]) for r in recs]
        if not all(map(math.isfinite, aa + forgetting)):
            raise ValueError(f"{search.val_name(point)}: a non-finite validation AA or forgetting on seeds "
                             f"{list(seeds)}: {aa}, {forgetting}; a tuning choice compares finite numbers only")
        # math.fsum: the exactly rounded sum, so equal numbers in another seed order give equal means (a plain sum
        # differed in the last bit, and the tie rule was never asked)
        rows.append({"index": i, "name": search.val_name(point), "final_name": search.test_name(point),
                     "settings": dict(point), "val_aa": aa, "val_aa_mean": math.fsum(aa) / len(aa),
                     "val_aa_sd": statistics.stdev(aa) if len(aa) > 1 else 0.0,
                     "val_forgetting_mean": math.fsum(forgetting) / len(forgetting)})
    groups = identical_groups(rows, seeds, fingerprints)
    for row in rows:
        row["identical_to"] = [j for g in groups if row["index"] in g for j in g if j != row["index"]]
    best = max(r["val_aa_mean"] for r in rows)
    tied = [r for r in rows if r["val_aa_mean"] >= best - tolerance]
    order = (lambda r: r["index"]) if tie == "first" else (lambda r: (r["val_forgetting_mean"], r["index"]))
    chosen = min(tied, key=order)
    return {"run": search.run, "baseline": search.baseline, "selection_seeds": list(seeds), "tie": tie,
            "tolerance": tolerance, "points": rows, "tied": [r["index"] for r in tied], "identical": groups,
            "decisiveness": decisiveness(chosen, rows, seeds),
            "chosen": {k: chosen[k] for k in ("index", "name", "final_name", "settings", "val_aa_mean", "val_aa_sd",
                                              "identical_to")}}


def identical_groups(rows: Sequence[Mapping[str, Any]], seeds: Sequence[int],
                     fingerprints: Mapping[tuple[str, int], str] | None) -> list[list[int]]:
    """The groups (point indices, two or more) of points whose runs have the same fingerprint on every seed."""
    if not fingerprints:
        return []
    by_runs: dict[tuple[str, ...], list[int]] = {}
    for r in rows:
        by_runs.setdefault(tuple(fingerprints[(r["name"], s)] for s in seeds), []).append(r["index"])
    return [g for g in by_runs.values() if len(g) > 1]


def decisiveness(chosen: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """How decisive the choice is: the runner-up (the best point not identical to the chosen one), the chosen
    point's lead over it in mean validation AA, the spread (the larger of the two points' standard deviations
    over the selection seeds), ``decisive`` (the lead exceeds the spread), and the paired per-seed differences'
    95 % interval (Student's t, :class:`intact.metrics.Paired`). ``identical_tie``: the chosen point's runs are
    the same as another point's, so the choice between them is the tie rule's, not the data's."""
    from intact.metrics import Paired  # numpy: not when the Snakefile imports this module

    others = [r for r in rows if r["index"] != chosen["index"] and r["index"] not in chosen["identical_to"]]
    out: dict[str, Any] = {"identical_tie": bool(chosen["identical_to"]), "runner_up": None, "lead": None,
                           "spread": None, "decisive": None, "lead_interval": None, "better_seeds": None}
    if not others:
        return out
    runner = max(others, key=lambda r: (r["val_aa_mean"], -r["index"]))
    paired = Paired.of(dict(zip(seeds, chosen["val_aa"])), dict(zip(seeds, runner["val_aa"])))
    lead, spread = chosen["val_aa_mean"] - runner["val_aa_mean"], max(chosen["val_aa_sd"], runner["val_aa_sd"])
    interval = paired.interval()
    out.update(runner_up={k: runner[k] for k in ("index", "name", "val_aa_mean", "val_aa_sd")}, lead=lead,
               spread=spread, decisive=lead > spread, lead_interval=list(interval) if interval else None,
               better_seeds=paired.better)
    return out


def run_fingerprint(run: Any) -> str:
    """What makes two runs the same run: every task's accuracies (R) and the per-epoch training loss and
    accuracy of every task, at full precision (timings left out)."""
    from intact.hashing import stable_hash

    epochs = [[{k: e.get(k) for k in ("ce", "acc")} for e in t["epochs"]] for t in run.trains]
    return stable_hash({"R": [e["accuracy"] for e in run.evals], "epochs": epochs}, length=16)


def read_choice(path: str | os.PathLike) -> dict[str, Any]:
    """A search's choice record as ``tune_select`` wrote it (sealed: :func:`intact.io.write_record`). Every reader
    goes through here - the final runs' names, the tune report, a final run's tracking - so a hand-edited choice
    is refused naming the file, not trained, reported or logged (:class:`intact.io.ArtifactError`)."""
    from intact.io import check_seal, read_json

    record = read_json(path)
    check_seal(path, record)
    return record


def choose(study: TuneStudy, benchmark: str, run: str, metrics_paths: Sequence[str],
           config_hashes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The choice record of search ``run`` of ``study`` (:func:`expand_tune`) on ``benchmark`` from its points'
    ``metrics.json`` (checkpoint ``tune_select``): :func:`select`'s record with the benchmark and the final runs it
    asks for. Each point's run is read by :func:`intact.results.read_run`, which refuses a ``metrics.json`` or
    ``R.csv`` that its task records do not give, an edited task record, one of another config than
    ``config_hashes[<run folder>]`` (the hash its config gives now), and a state or hypercube that is not the one
    its record describes: an edited number never makes a choice."""
    from intact.results import read_run  # numpy and pandas: not when the Snakefile imports this module

    folders = [os.path.dirname(p) for p in metrics_paths]
    runs = [read_run(f, config_hash=(config_hashes or {}).get(f), tensors=True) for f in folders]
    metrics = {(r.method, r.seed): r.metrics for r in runs}
    fingerprints = {(r.method, r.seed): run_fingerprint(r) for r in runs}
    out = select(study.search(run), metrics, study.selection_seeds, tie=study.tie, tolerance=study.tolerance,
                 fingerprints=fingerprints)
    out["benchmark"] = benchmark
    out["final_runs"] = {"method": out["chosen"]["final_name"], "seeds": list(study.seeds), "eval_split": "test"}
    return out
