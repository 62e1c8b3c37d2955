"""The paper's tables (main, ablation, integration, hyperparameters, efficiency) in the paper's shape, with
the paper's numbers, ours ("here") and their difference side by side; ``—`` wherever a cell was not
reported or not run. Built from :func:`~intact.report.paper.paper_numbers` and
:func:`~intact.report.paper.stored_results` only.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from intact.naming import format_value, parse_method_name
from intact.metrics import Paired, Stat
from intact.report.paper import (
    AA_NOTE, FORGETTING_NOTE, benchmark_title, fmt, method_cell, paper_numbers, paper_pm, rows_and_labels, seeds_note,
)
from intact.report.settings import LAMBDAS, PAPER_BENCHMARKS, PAPER_RUN, ReportSettings, lambda_benchmarks
from intact.report.paper_efficiency import efficiency_table
from intact.report.render import Column, Table, bold_best, bold_note
from intact.report.completeness import Ledger
from intact.report.tables import (CAPTION, backbone_notes, ci_cell, ci_note, ci_record, paired_cells, paired_columns,
                                  paired_note, paired_record, paired_table, pm_n)
from intact.results import StoredResults
from intact.studies import ablation_variants

PAPER_TERM_ORDER = ("intdrift", "var", "align", "feat")  # the paper's ablation rows
TERM_TITLES = {"intdrift": "L_IntDrift", "var": "L_Var", "align": "L_Align", "feat": "L_Feat"}
LAMBDA_TITLES = {"lambda_feat": "λ_Feat", "lambda_intdrift": "λ_IntDrift", "lambda_var": "λ_Var",
                 "lambda_align": "λ_Align"}


def average_stat(ledger: Ledger, row: str, run: str, benchmarks: Sequence[str]) -> Stat | None:
    """Per seed, the mean AA over ``benchmarks`` (seeds present in all of them), then mean ± std."""
    per = [ledger.values(row, b, run) for b in benchmarks]
    seeds = sorted(set.intersection(*(set(p) for p in per))) if per else []
    return Stat.of([np.mean([p[s] for p in per]) for s in seeds])


def _extra_benchmarks(stored: StoredResults) -> list[str]:
    return [b for b in stored.benchmarks() if b not in PAPER_BENCHMARKS]


def _stat(ledger: Ledger, row: str, run: str | None, benchmark: str, columns: Sequence[str]) -> Stat | None:
    """A run's AA on one benchmark (``average``: the per-seed mean over ``columns``); None: not run."""
    if run is None:
        return None
    if benchmark == "average":
        return average_stat(ledger, row, run, columns)
    return ledger.stat(row, benchmark, run)


def _comparison_columns(columns: Sequence[str], extra: Sequence[str], official: bool) -> list[Column]:
    cols = [Column("method", "Method", align="l")]
    for b in [*columns, "average"]:
        group = "Average" if b == "average" else benchmark_title(b)
        cols += [Column(f"{b}_paper", "paper", group), Column(f"{b}_here", "here", group),
                 Column(f"{b}_ci", "95 % CI", group), Column(f"{b}_delta", "Δ", group)]
        if official:
            cols += [Column(f"{b}_official", "official", group), Column(f"{b}_official_ci", "off. 95 % CI", group),
                     Column(f"{b}_official_delta", "Δ off.", group)]
    return cols + [c for b in extra for c in (Column(f"{b}_here", "here", benchmark_title(b)),
                                              Column(f"{b}_ci", "95 % CI", benchmark_title(b)))]


def _here(stat: Stat | None, paper: Sequence[float] | None) -> tuple[list[str], dict[str, Any]]:
    """Our mean ± std with its seed count, its 95 % interval (and whether the paper's mean lies inside), Δ = ours −
    paper: the three cells and the CSV fields (mean, std, seeds, delta, ci_low, ci_high, paper_in_ci)."""
    delta = stat.mean - paper[0] if (stat and paper) else None
    cells = [pm_n(stat), ci_cell(stat, paper[0] if paper else None), fmt(delta, signed=True)]
    return cells, {"mean": stat.mean if stat else None, "std": stat.std if stat else None,
                   "seeds": stat.n if stat else None, "delta": delta, **ci_record(stat, paper[0] if paper else None)}


def _comparison_cells(ledger: Ledger, label: str, run: str | None, row: Mapping[str, Any] | None, b: str,
                      columns: Sequence[str], section: Mapping[str, Any],
                      official: Mapping[str, str | None] | None) -> tuple[dict[str, str], dict[str, Any]]:
    """One row's cells under benchmark ``b`` (paper | here | 95 % CI | Δ, and the official run's) and its record."""
    paper = row["aa"].get(b) if row else None
    here = _stat(ledger, label, run, b, columns)
    shown, fields = _here(here, paper)
    cells = {f"{b}_paper": paper_pm(paper), **dict(zip((f"{b}_here", f"{b}_ci", f"{b}_delta"), shown))}
    record = {"method": label, "run": run, "benchmark": b,
              "paper_mean": paper[0] if paper else None, "paper_std": paper[1] if paper else None,
              "paper_seeds": section["seeds"] if paper else None,
              **{("delta" if k == "delta" else f"here_{k}"): v for k, v in fields.items()}}
    if official is not None:
        off = official.get(run) if run else None
        shown, fields = _here(_stat(ledger, f"{label} (official)", off, b, columns), paper)
        cells.update(zip((f"{b}_official", f"{b}_official_ci", f"{b}_official_delta"), shown))
        record.update({"official_run": off, **{f"official_{k}": v for k, v in fields.items()}})
    return cells, record


def comparison_table(name: str, title: str, section: Mapping[str, Any], ours: Sequence[str], ledger: Ledger,
                     official: Mapping[str, str | None] | None = None, official_note: str = "") -> Table:
    """Main / integration shape: one row per method, per benchmark paper | here | 95 % CI | Δ, then our
    benchmarks. ``official`` (our run -> its run under the official protocol, None: none): per benchmark also
    that run, its interval and its Δ to the paper, which ran it so (docs/protocols.md, "The two protocols");
    ``official_note`` says which rows show their default run there, and why. Every cell reads through ``ledger``."""
    stored = ledger.stored
    columns = [c for c in section["columns"] if c != "average"]
    extra = _extra_benchmarks(stored)
    cols = _comparison_columns(columns, extra, official is not None)
    table = Table(name, f"{title} (ours with its Student's t 95 % CI beside the paper's mean)", cols)
    values, seeds, records = [], [], []
    rows = rows_and_labels(section["rows"], ours)
    for i, (label, run, row) in enumerate(rows):
        if row is None and (i == 0 or rows[i - 1][2] is not None):
            table.rules.add(i)  # our runs the paper does not list, below a rule
        cells = {"method": method_cell(label, run)}
        parts = [_comparison_cells(ledger, label, run, row, b, columns, section, official)
                 for b in [*columns, "average", *extra]]
        for shown, record in parts:
            cells.update(shown)
            records.append(record)
        table.rows.append(cells)
        values.append({f"{r['benchmark']}_{k}": r[f"{k}_mean"] for _, r in parts for k in ("paper", "here")})
        seeds.append({f"{r['benchmark']}_here": r["here_seeds"] for _, r in parts})
    unequal = bold_best(table, [c.key for c in cols if c.key.endswith(("_paper", "_here"))], values, seeds=seeds)
    table.data = pd.DataFrame(records)
    table.notes = [
        AA_NOTE, FORGETTING_NOTE,
        f"Paper: mean ± std over {section['seeds']} runs (paper table {section['table']}). {section['caption']}",
        seeds_note([*table.data["here_seeds"], *table.data.get("official_seeds", [])], stored), ci_note(table.data),
        *backbone_notes(stored),
        f"Δ = here − paper (AA points). Average = mean over {', '.join(map(benchmark_title, columns))} (here: per "
        "seed, only where all of them were run). — = not reported / not run.", bold_note(table, unequal),
    ]
    if official is not None:
        table.notes.append(OFFICIAL_NOTE + (f" {official_note}" if official_note else ""))
    # a paper row's note: how our run of it differs, or why it is reported only (ESN, CPrompt)
    table.notes += [row["note"] for _, _, row in rows if row and row.get("note")]
    runs = [r for _, r, _ in rows if r]
    table.blocks.append(paired_table(f"{name}_paired", f"{title}: paired per-seed differences", runs, stored,
                                     [*columns, *extra]))
    return table


OFFICIAL_NOTE = ("here: the intact protocol (every row under the config's one budget); official: the row's run under "
                 "the official protocol (its authors' epochs, batch size, optimiser, schedule, backbone and "
                 "augmentation, as KA-Prompt's Table 1 ran them), and Δ off. = official − paper; — where the row "
                 "has no run under it. docs/protocols.md, \"The two protocols\".")


def _ablation_columns(paper_benchmark: str, benchmarks: Sequence[str]) -> list[Column]:
    group = f"Paper ({benchmark_title(paper_benchmark)})"
    cols = [Column(t, TERM_TITLES.get(t, t)) for t in PAPER_TERM_ORDER]
    cols += [Column("paper_aa", "AA", group), Column("paper_delta", "Δ", group)]
    for b in benchmarks:
        g = f"Here ({benchmark_title(b)})"
        cols += [Column(f"{b}_aa", "AA", g), Column(f"{b}_aa_ci", "95 % CI", g),
                 *paired_columns(f"{b}_", g, better="full better")]
    return cols


def ablation_table(ledger: Ledger, spec: Mapping[str, Any], benchmarks: Sequence[str] | None = None,
                   title: str | None = None) -> Table:
    """The full method and each term removed (``spec``: an ablation study), on the paper's benchmark and every
    stored one (or on ``benchmarks``): AA with its interval beside the paper's, and each variant − full by seed."""
    stored, paper = ledger.stored, paper_numbers()["ablation"]
    full, variants = spec["method"], ablation_variants(spec)
    order = [None] + [t for t in PAPER_TERM_ORDER if t in variants] + [t for t in variants if t not in PAPER_TERM_ORDER]
    if benchmarks is None:
        benchmarks = [paper["benchmark"]] + [b for b in stored.benchmarks() if b != paper["benchmark"]]
    cols = _ablation_columns(paper["benchmark"], benchmarks)
    title = (title or f"Ablation of {full}: each InTAct term removed") + f" ({CAPTION} against the full method)"
    table = Table("ablation", title, cols, rules={1})
    values, seeds, records = [], [], []
    for term in order:
        run = full if term is None else variants[term]
        label = "full" if term is None else f"without {term}"
        paper_aa = paper["full"] if term is None else paper["removed"].get(term)
        cells = {t: "✗" if t == term else "✓" for t in PAPER_TERM_ORDER}
        cells.update(paper_aa=fmt(paper_aa),
                     paper_delta="—" if term is None else fmt(paper["delta"].get(term), signed=True))
        nums, counts = {"paper_aa": paper_aa}, {}
        for b in benchmarks:
            on_paper = b == paper["benchmark"]
            s = ledger.stat(label, b, run)
            p = Paired.of(ledger.values(label, b, run), ledger.values("full", b, full)) if term is not None else None
            nums[f"{b}_aa"], counts[f"{b}_aa"] = (s.mean, s.n) if s else (None, None)
            cells.update({f"{b}_aa": pm_n(s), f"{b}_aa_ci": ci_cell(s, paper_aa if on_paper else None),
                          **paired_cells(p, f"{b}_", better_is_worse=True)})
            records.append({"removed": term or "", "run": run, "benchmark": b,
                            "paper_aa": paper_aa if on_paper else None,
                            "paper_delta": paper["delta"].get(term) if (term and on_paper) else None,
                            "here_mean": s.mean if s else None, "here_std": s.std if s else None,
                            "here_seeds": s.n if s else None,
                            **{f"here_{k}": v for k, v in ci_record(s, paper_aa if on_paper else None).items()},
                            **paired_record(p), "full_better": p.worse if p else None})
        table.rows.append(cells)
        values.append(nums)
        seeds.append(counts)
    unequal = bold_best(table, [c.key for c in cols if c.key.endswith("_aa")], values, seeds=seeds)
    table.data = pd.DataFrame(records)
    table.notes = [
        AA_NOTE, FORGETTING_NOTE,
        f"Paper: AA averaged over {paper['seeds']} seeds, no std (paper table {paper['table']}).",
        seeds_note(table.data["here_seeds"], stored), ci_note(table.data), *backbone_notes(stored),
        "Δ: AA without the term − AA of the full method (negative: the term helps; the full row has none). "
        + paired_note("full better: the seeds with d_s < 0"), bold_note(table, unequal),
    ]
    return table


def hyperparameter_table(report: ReportSettings) -> Table:
    paper = paper_numbers()["hyperparameters"]
    cols = [Column("benchmark", "Benchmark", align="l")]
    for k in LAMBDAS:
        cols += [Column(f"{k}_paper", "paper", LAMBDA_TITLES[k]), Column(f"{k}_ours", "ours", LAMBDA_TITLES[k])]
    table = Table("hyperparameters", f"InTAct's λ per benchmark ({PAPER_RUN})", cols)
    records = []
    for b in lambda_benchmarks(report.benchmarks):
        row = paper["rows"].get(b)
        ours = report.lambdas.get(b)
        cells = {"benchmark": benchmark_title(b)}
        for k in LAMBDAS:
            p = (paper["lambda_align"] if k == "lambda_align" else row[k]) if row else None
            o = ours[k] if ours is not None else None
            cells[f"{k}_paper"] = "—" if p is None else format_value(p)
            cells[f"{k}_ours"] = "—" if o is None else format_value(o)
            records.append({"benchmark": b, "lambda": k, "paper": p, "ours": o})
        table.rows.append(cells)
    table.data = pd.DataFrame(records)
    table.notes = [
        f"Paper: table {paper['table']}; λ_Align fixed at 1. Ours: what `{PAPER_RUN}` resolves to in this config "
        "(the intact: section, then benchmarks.<b>.overrides). — under paper: a benchmark the paper does not tune; "
        "under ours: one not configured here.",
        AA_NOTE, FORGETTING_NOTE, "Seeds: not applicable (settings, not results).",
    ]
    return table


def official_note(report: ReportSettings) -> str:
    """In words: which rows' official cells show their default run (declared the same, and the source), and
    which have none."""
    if report.official is None:
        return ""
    shown: dict[str, list[str]] = {}
    for m, r in report.official.items():
        if r == m:
            shown.setdefault(parse_method_name(m).base, []).append(f"`{m}`")
    sources = report.official_sources
    text = [f"{', '.join(rows)}: the official settings of {base} are the intact protocol's (source: {sources[base]}), "
            "so the official cell shows the intact run." for base, rows in shown.items()]
    none = [f"`{m}`" for m, r in report.official.items() if r is None]
    if none:
        text.append(f"{', '.join(none)}: no official script declared, so no run under the official protocol (—).")
    return " ".join(text)


def _scope(report: ReportSettings, runs: Sequence[str | None], section: Mapping[str, Any] | None = None,
           stored: StoredResults | None = None) -> dict[str, list[str]]:
    """Benchmark -> ``runs``: what a table exists to show, on every benchmark the config runs that the table has
    columns for (a comparison table ``section``'s own and the stored ones outside the paper's; every one else)."""
    benchmarks = list(report.benchmarks)
    if section is not None:
        shown = {*section["columns"], *_extra_benchmarks(stored)}
        benchmarks = [b for b in benchmarks if b in shown]
    return {b: [r for r in runs if r] for b in benchmarks}


def _complete(table: Table, ledger: Ledger, scope: Mapping[str, Sequence[str]]) -> Table:
    """``table`` with its one missing note, once :meth:`Ledger.check` found every stored run of ``scope`` shown."""
    ledger.check(scope)
    note = ledger.missing_note()
    if note:
        table.notes.insert(0, note)
    return table


def paper_tables(report: ReportSettings, stored: StoredResults) -> dict[str, Table]:
    """Every paper table, keyed by its output name (the names of :data:`intact.plan.PAPER_TABLES`). A stored run
    that a table exists to show but no cell shows is an error (:class:`~intact.report.completeness.IncompleteReport`);
    declared runs not stored yet are named in each table's missing note."""
    numbers, official, ours = paper_numbers(), report.official, list(report.main_methods)
    integration = report.integration
    section = {**numbers["integration"], "rows": [{**r, "ours": integration.get(r["ours"])}
                                                  for r in numbers["integration"]["rows"]]}
    ablation = report.ablation
    ledgers = {name: Ledger(name, stored) for name in ("main", "integration", "ablation", "efficiency")}
    tables = {
        "main": comparison_table("main", "AA on the paper's benchmarks (InTAct on CODA-P)", numbers["main"], ours,
                                 ledgers["main"], official, official_note(report)),
        "ablation": ablation_table(ledgers["ablation"], ablation),
        "integration": comparison_table("integration", "InTAct integrated into prompt methods", section,
                                        list(integration.values()), ledgers["integration"]),
        "hyperparameters": hyperparameter_table(report),
        "efficiency": efficiency_table(ledgers["efficiency"], ours),
    }
    # without an integration study its table shows the main study's L2P and DualPrompt: the main table's runs
    scopes = {"main": _scope(report, [*ours, *(official or {}).values()], numbers["main"], stored),
              "integration": _scope(report, list(integration.values()) if report.integration_studied else [], section,
                                    stored),
              "ablation": _scope(report, [ablation["method"], *ablation_variants(ablation).values()]),
              "efficiency": _scope(report, ours)}
    for name, scope in scopes.items():
        _complete(tables[name], ledgers[name], scope)
    return tables
