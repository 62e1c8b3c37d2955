"""The tables of one benchmark's stored runs (the default run's, the studies'), and the cells every table
shares: mean ± std, the 95 % interval of a mean beside the paper's number, and each comparison of two runs
seed by seed (:class:`intact.metrics.Paired`: the differences, their mean, a Student's t interval, and how
many seeds are better). Rendered by :mod:`intact.report.render`; the paper's tables are built from the same
pieces (:mod:`intact.report.paper_tables`).
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from intact.metrics import Paired, Stat
from intact.naming import format_value, intact_pair, pairs
from intact.report.paper import AA_NOTE, FORGETTING_NOTE, benchmark_title
from intact.report.render import Column, Table
from intact.results import StoredResults, StoredRun
from intact.studies import sensitivity_grid

#: metric key -> column title of the per-method summary
METRICS = {"aa": "AA", "forgetting_max": "Forgetting (max-final)", "forgetting_one_step": "Forgetting (one-step)",
           "bwt": "BWT", "caa": "CAA"}

SUMMARY_NOTE = (
    "Forgetting (one-step): CODA-Prompt's mean drop per new task. BWT: mean final minus just-learned accuracy. "
    "CAA: mean of the AA evolution. Certificate: worst-case |logit drift| of the head over the previous hypercube "
    "after the last task (the InTAct guarantee, measured). Train s / run: seconds of training over all tasks, on "
    "the machine that ran it. Mean ± sample std over seeds; the certificate and the seconds: mean over seeds."
)
PAIRED_NOTE = (
    "Paired by seed: d_s = A(s) − B(s) on every seed s both runs have (the same seed: the same data order and "
    "initial prompts, so the pairing removes the seed-to-seed variance the unpaired ± still holds). Δ = mean of "
    "d_s. 95 % CI: Student's t on the paired differences, Δ ± t(0.975, n − 1) · sd(d) / sqrt(n); none with one "
    "seed, a single point where every d_s is the same (identical runs: [+0.00, +0.00]). An interval that excludes "
    "0 is a difference these seeds resolve; one that contains 0 is not."
)


def ci_note(data: pd.DataFrame) -> str:
    """How a table's "95 % CI" cells are computed, with what ``in`` / ``out`` means only where a cell compares the
    paper's mean with our interval (a ``*paper_in_ci`` field of :func:`ci_record` set in ``data``, its records)."""
    compared = any(str(c).endswith("paper_in_ci") and data[c].notna().any() for c in data.columns)
    return ("95 % CI of ours: Student's t interval of the mean over our seeds, mean ± t(0.975, n − 1) · sd / sqrt(n) "
            "(none with one seed)" + ("; in / out: whether the paper's mean lies inside it." if compared else "."))


#: what the caption (title) of every comparison table says about its interval
CAPTION = "paired by seed, Δ with its Student's t 95 % CI"
#: the CSV fields of a paired comparison (:func:`paired_record`)
PAIRED_FIELDS = ("diff_mean", "diff_std", "ci_low", "ci_high", "better", "worse", "seeds", "seed_ids", "diffs")


def paired_note(better: str = "better: the seeds with d_s > 0") -> str:
    """How every comparison of two runs is computed (the caption of its table); ``better``: what its count says."""
    return PAIRED_NOTE + f" {better} (d_s = 0 counts as neither)."


def pm(stat: Stat | None) -> str:
    """``mean ± std``; ``—`` where nothing was run."""
    return "—" if stat is None else f"{stat.mean:.2f} ± {stat.std:.2f}"


def pm_n(stat: Stat | None) -> str:
    """``mean ± std (n=<seeds>)``: a cell that states its seed count; ``—`` where nothing was run."""
    return "—" if stat is None else f"{pm(stat)} (n={stat.n})"


def interval_cell(interval: tuple[float, float] | None, signed: bool = False) -> str:
    if interval is None:
        return "—"
    return "[" + ", ".join(f"{x:+.2f}" if signed else f"{x:.2f}" for x in interval) + "]"


def ci_cell(stat: Stat | None, paper: float | None = None) -> str:
    """Our mean's 95 % interval, and whether the paper's mean ``paper`` lies inside it (``in`` / ``out``)."""
    interval = stat.interval() if stat else None
    if interval is None or paper is None:
        return interval_cell(interval)
    return f"{interval_cell(interval)} {'in' if interval[0] <= paper <= interval[1] else 'out'}"


def ci_record(stat: Stat | None, paper: float | None = None) -> dict[str, Any]:
    """The CSV fields of :func:`ci_cell`: ``ci_low``, ``ci_high`` and ``paper_in_ci``."""
    interval = stat.interval() if stat else None
    low, high = interval if interval else (None, None)
    inside = None if interval is None or paper is None else bool(low <= paper <= high)
    return {"ci_low": low, "ci_high": high, "paper_in_ci": inside}


def paired_columns(prefix: str = "", group: str = "", better: str = "A better") -> list[Column]:
    return [Column(f"{prefix}per_seed", "Δ per seed", group), Column(f"{prefix}diff", "Δ", group),
            Column(f"{prefix}ci", "Δ 95 % CI", group), Column(f"{prefix}better", better, group)]


def paired_cells(p: Paired | None, prefix: str = "", better_is_worse: bool = False) -> dict[str, str]:
    """The cells of :func:`paired_columns`; ``better_is_worse``: count the seeds where A is worse (an ablation's
    "full better": the variant minus the full method below 0)."""
    keys = [f"{prefix}{k}" for k in ("per_seed", "diff", "ci", "better")]
    if p is None:
        return dict.fromkeys(keys, "—")
    wins = p.worse if better_is_worse else p.better
    values = [" / ".join(f"{d:+.2f}" for d in p.diffs), f"{p.stat.mean:+.2f}", interval_cell(p.interval(), True),
              f"{wins} of {len(p.seeds)}"]
    return dict(zip(keys, values))


def paired_record(p: Paired | None) -> dict[str, Any]:
    """The CSV fields (:data:`PAIRED_FIELDS`) of one comparison; None throughout where it has no seed."""
    if p is None:
        return dict.fromkeys(PAIRED_FIELDS)
    low, high = p.interval() or (None, None)
    return {"diff_mean": p.stat.mean, "diff_std": p.stat.std, "ci_low": low, "ci_high": high, "better": p.better,
            "worse": p.worse, "seeds": len(p.seeds), "seed_ids": " ".join(map(str, p.seeds)),
            "diffs": " ".join(map(repr, p.diffs))}


def backbone_notes(stored: StoredResults) -> list[str]:
    """Which backbone every "here" column ran on: a number is never compared across checkpoints by accident. None
    where the report was not told (a study's report reads its runs only)."""
    if not stored.backbones:
        return []
    return ["Backbone of each \"here\" column: " + "; ".join(
        f"{benchmark_title(b)}: {text}" for b, text in stored.backbones.items()) + "."]


def paired_table(name: str, title: str, methods: Sequence[str], stored: StoredResults,
                 benchmarks: Sequence[str]) -> Table:
    """Each InTAct run minus its partner (without InTAct, or InTAct as the paper writes it) seed by seed,
    on the ``benchmarks`` that have stored runs (all of them if none has)."""
    benchmarks = [b for b in benchmarks if b in stored.benchmarks()] or list(benchmarks)
    cols = [Column("pair", "Comparison (A − B)", align="l")]
    for b in benchmarks:
        cols += paired_columns(f"{b}_", benchmark_title(b))
    table = Table(name, f"{title} ({CAPTION})", cols)
    records = []
    for a, b_ in pairs(list(methods)):
        cells = {"pair": f"`{a}` − `{b_}`"}
        for b in benchmarks:
            p = Paired.of(stored.values(b, a), stored.values(b, b_))
            cells.update(paired_cells(p, f"{b}_"))
            records.append({"a": a, "b": b_, "benchmark": b, **paired_record(p)})
        table.rows.append(cells)
    table.data = pd.DataFrame(records, columns=["a", "b", "benchmark", *PAIRED_FIELDS])
    table.notes = [paired_note(), AA_NOTE, FORGETTING_NOTE, *backbone_notes(stored)]
    if not table.rows:
        table.notes.insert(0, "No pair of runs (with and without +intact) is declared here.")
    return table


def _last_certificate(runs: Sequence[StoredRun]) -> tuple[float, str, list[int]]:
    """The mean of the runs' last-task certificates (NaN: none), its cell (``n/a``: no run records one; with
    ``(k of n)`` where only k are finite) and the seeds whose certificate is not finite."""
    last = {r.seed: c[-1] for r, c in ((r, r.metrics.get("certificate")) for r in runs) if c and c[-1] is not None}
    finite = [c for c in last.values() if math.isfinite(c)]
    bad = [s for s, c in last.items() if not math.isfinite(c)]
    mean = float(np.mean(finite)) if finite else math.nan
    if not last:
        return mean, "n/a", bad
    if not finite:
        return mean, "not finite", bad
    return mean, f"{mean:.3g}" + (f" ({len(finite)} of {len(runs)})" if len(finite) < len(runs) else ""), bad


def summary_table(name: str, title: str, stored: StoredResults, benchmark: str, methods: Sequence[str]) -> Table:
    """One row per method (mean ± std over seeds of AA, forgetting, BWT, CAA; the last certificate and the
    training time), then InTAct's paired gain over each partner (:func:`paired_table`) as a block."""
    cols = [Column("method", "Method", align="l"), Column("seeds", "Seeds"),
            *(Column(k, t) for k, t in METRICS.items()), Column("certificate", "Certificate (last task)"),
            Column("train_seconds", "Train s / run")]
    table, records, nonfinite = Table(name, title, cols), [], {}
    for m in methods:
        runs = stored.select(benchmark, m)
        if not runs:
            continue
        stats = {k: Stat.of([float(r.metrics[k]) for r in runs]) for k in METRICS}
        certificate, shown, bad = _last_certificate(runs)
        if bad:
            nonfinite[m] = bad
        seconds = float(np.mean([r.metrics["train_seconds"] for r in runs]))
        table.rows.append({"method": f"`{m}`", "seeds": str(len(runs)), **{k: pm(s) for k, s in stats.items()},
                           "certificate": shown, "train_seconds": f"{seconds:.3g}"})
        records.append({"method": m, "seeds": len(runs), **{f"{k}_{f}": getattr(s, f) for k, s in stats.items()
                                                             for f in ("mean", "std")},
                        "certificate_last_mean": certificate, "train_seconds_mean": seconds})
    table.data = pd.DataFrame(records)
    table.notes = [AA_NOTE, FORGETTING_NOTE, SUMMARY_NOTE]
    uncertified = [r["method"] for r in records
                   if math.isnan(r["certificate_last_mean"]) and r["method"] not in nonfinite]
    if uncertified:
        table.notes.append(f"Certificate n/a: {', '.join(f'`{m}`' for m in uncertified)} "
                           f"record{'s' if len(uncertified) == 1 else ''} none (no hypercube of "
                           "an earlier task: the run starts afresh at every task, or shares nothing between domains).")
    if nonfinite:
        runs = ", ".join(f"`{m}` on seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}"
                         for m, s in nonfinite.items())
        table.notes.append(f"Certificate not finite (the cell: the mean of the finite ones, and how many): {runs}.")
    table.blocks.append(paired_table(f"{name}_paired", f"{title}: InTAct's paired gain", methods, stored, [benchmark]))
    return table


def integration_table(title: str, stored: StoredResults, benchmark: str, entries: Sequence[str]) -> Table:
    """Each method with and without InTAct (``entries``: :func:`intact.naming.intact_pair`), paired by seed; the seeds
    column counts the pairs the difference and its interval use."""
    cols = [Column("method", "Method", align="l"), Column("seeds", "Seeds"), Column("aa", "AA"),
            Column("aa_intact", "AA + InTAct"), *paired_columns(better="+ InTAct better"),
            Column("forgetting", "Forgetting (max-final)"), Column("forgetting_intact", "Forgetting + InTAct")]
    table, records = Table("integration", f"{title} ({CAPTION})", cols), []
    for entry in entries:
        base, with_ = intact_pair(entry)
        b, w = (Stat.of(list(stored.values(benchmark, m).values())) for m in (base, with_))
        if b is None or w is None:
            continue
        fb, fw = (Stat.of(list(stored.values(benchmark, m, "forgetting_max").values())) for m in (base, with_))
        p = Paired.of(stored.values(benchmark, with_), stored.values(benchmark, base))
        label = f"`{base}`" if intact_pair(base) == (base, with_) else f"`{base}` vs `{with_}`"
        table.rows.append({"method": label, "seeds": str(len(p.seeds) if p else 0), "aa": pm(b),
                           "aa_intact": pm(w), **paired_cells(p), "forgetting": pm(fb), "forgetting_intact": pm(fw)})
        records.append({"method": base, "run": with_, "aa_mean": b.mean, "aa_std": b.std, "aa_intact_mean": w.mean,
                        "aa_intact_std": w.std, **paired_record(p), "forgetting_max_mean": fb.mean,
                        "forgetting_max_std": fb.std, "forgetting_max_intact_mean": fw.mean,
                        "forgetting_max_intact_std": fw.std})
    table.data = pd.DataFrame(records)
    table.notes = ["A = the method with InTAct, B = without. " + paired_note("+ InTAct better: the seeds with d_s > 0"),
                   AA_NOTE, FORGETTING_NOTE,
                   "Mean ± sample std over seeds."]
    return table


def sensitivity_table(title: str, stored: StoredResults, benchmark: str, spec: Mapping[str, Any],
                      defaults: Mapping[str, float | None]) -> Table:
    """Final AA per swept value, and each value against the family's default (``defaults``:
    :func:`~intact.report.settings.default_points`)."""
    cols = [Column("lambda", "λ", align="l"), Column("value", "Value"), Column("seeds", "Seeds"), Column("aa", "AA"),
            Column("forgetting", "Forgetting (max-final)"), *paired_columns(group="vs the default", better="better")]
    table, records = Table("sensitivity", f"{title} ({CAPTION} against the default)", cols), []
    for key, points in sensitivity_grid(spec).items():
        ref = points.get(defaults.get(key))
        for value, name in points.items():
            aa, forgetting = (Stat.of(list(stored.values(benchmark, name, k).values()))
                              for k in ("aa", "forgetting_max"))
            if aa is None:
                continue
            p = (Paired.of(stored.values(benchmark, name), stored.values(benchmark, ref))
                 if ref and ref != name else None)
            table.rows.append({"lambda": key, "value": format_value(value) + (" (default)" if name == ref else ""),
                               "seeds": str(aa.n), "aa": pm(aa), "forgetting": pm(forgetting), **paired_cells(p)})
            records.append({"lambda": key, "value": value, "method": name, "default": name == ref, "runs": aa.n,
                            "aa_mean": aa.mean, "aa_std": aa.std, "forgetting_max_mean": forgetting.mean,
                            "forgetting_max_std": forgetting.std, **paired_record(p)})
    table.data = pd.DataFrame(records)
    missing = [k for k in sensitivity_grid(spec) if defaults.get(k) is None]
    table.notes = [f"A = the row's run, B = the default of its λ (the grid value that equals {spec['method']}'s "
                   "setting). " + paired_note(), AA_NOTE, FORGETTING_NOTE, "Mean ± sample std over seeds."]
    if missing:
        table.notes.insert(1, f"No grid value of {', '.join(missing)} equals the default: no comparison for it.")
    return table
