"""Aggregated tables (mean +- std over seeds) from per-run metrics, written as CSV and Markdown.

Every table says which forgetting definition it uses (both are computed, see :mod:`intact.metrics`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from intact.io import write_text
from intact.naming import TERMS
from intact.studies import integration_pair

#: metric key -> column title
METRICS = {
    "aa": "AA",
    "forgetting_max": "Forgetting (max-final)",
    "forgetting_one_step": "Forgetting (one-step)",
    "bwt": "BWT",
    "caa": "CAA",
}

NOTE = (
    "AA: mean accuracy (%) over all tasks after the last task. Forgetting (max-final): Chaudhry et al.'s mean over "
    "tasks of the best accuracy after learning the task, before the last task, minus the final one (can be negative; "
    "not Mammoth's form, whose max includes the last task, nor Avalanche's first-minus-final = −BWT; metrics.json "
    "also holds forgetting_mammoth). Forgetting (one-step): "
    "CODA-Prompt's mean drop per new task. BWT: mean final minus just-learned accuracy. CAA: mean of the "
    "AA evolution. Certificate: worst-case |logit drift| of the head over the previous hypercube after "
    "the last task (the InTAct guarantee, measured). Mean ± sample std over seeds."
)


def summarize_runs(runs: pd.DataFrame, methods: Sequence[str] | None = None, metrics: dict[str, str] = METRICS) -> pd.DataFrame:
    """One row per method: seeds, and mean / std (sample std, ddof=1) of each metric over seeds."""
    order = list(methods) if methods is not None else list(dict.fromkeys(runs["method"]))
    rows = []
    for method in order:
        sub = runs[runs["method"] == method]
        if sub.empty:
            continue
        row: dict[str, object] = {"method": method, "seeds": len(sub)}
        for key in metrics:
            vals = sub[key].astype(float).to_numpy()
            row[f"{key}_mean"] = float(vals.mean())
            row[f"{key}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        if "certificate" in sub:
            last = [c[-1] for c in sub["certificate"] if c and c[-1] is not None]
            row["certificate_last_mean"] = float(np.mean(last)) if last else float("nan")
        if "train_seconds" in sub:
            row["train_seconds_mean"] = float(sub["train_seconds"].mean())
        rows.append(row)
    return pd.DataFrame(rows)


def pm(row: pd.Series | dict, key: str) -> str:
    """``mean ± std`` of metric ``key`` in a summary row."""
    return f"{row[f'{key}_mean']:.2f} ± {row[f'{key}_std']:.2f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None, note: str | None = None) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = [f"### {title}", ""] if title else []
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def to_markdown(summary: pd.DataFrame, metrics: dict[str, str] = METRICS, title: str | None = None, note: str | None = NOTE) -> str:
    """The summary of :func:`summarize_runs` with ``mean ± std`` cells."""
    optional = [(c, t) for c, t in (("certificate_last_mean", "Certificate (last task)"), ("train_seconds_mean", "Train s / run")) if c in summary]
    header = ["Method", "Seeds", *metrics.values(), *(t for _, t in optional)]
    rows = []
    for _, r in summary.iterrows():
        cells = [f"`{r['method']}`", str(int(r["seeds"]))] + [pm(r, k) for k in metrics]
        cells += ["n/a" if np.isnan(r[c]) else f"{r[c]:.3g}" for c, _ in optional]
        rows.append(cells)
    return markdown_table(header, rows, title, note)


def ablation_table(runs: pd.DataFrame, full: str, variants: dict[str, str]) -> pd.DataFrame:
    """The full method and each term removed (``variants``: term -> run name), with the AA change."""
    summary = summarize_runs(runs, [full, *variants.values()]).set_index("method")
    rows = []
    for term, name in [(None, full), *variants.items()]:
        if name not in summary.index:
            continue
        r = summary.loc[name]
        rows.append({
            "method": name, **{t: t != term for t in TERMS}, "seeds": int(r["seeds"]),
            "aa_mean": r["aa_mean"], "aa_std": r["aa_std"],
            "forgetting_max_mean": r["forgetting_max_mean"], "forgetting_max_std": r["forgetting_max_std"],
            "delta_aa": r["aa_mean"] - summary.loc[full, "aa_mean"] if full in summary.index else float("nan"),
        })
    return pd.DataFrame(rows)


def ablation_markdown(table: pd.DataFrame, title: str | None = None) -> str:
    header = ["L_IntDrift", "L_Var", "L_Align", "L_Feat", "Run", "Seeds", "AA", "Δ AA", "Forgetting (max-final)"]
    rows = []
    for _, r in table.iterrows():
        marks = ["✓" if r[t] else "✗" for t in ("intdrift", "var", "align", "feat")]
        delta = "—" if r["delta_aa"] == 0 and all(r[t] for t in TERMS) else f"{r['delta_aa']:+.2f}"
        rows.append([*marks, f"`{r['method']}`", str(r["seeds"]), pm(r, "aa"), delta, pm(r, "forgetting_max")])
    return markdown_table(header, rows, title, "Δ AA: change of mean AA relative to the full method. " + NOTE)


def integration_table(runs: pd.DataFrame, bases: Sequence[str]) -> pd.DataFrame:
    """Each prompt method with and without InTAct."""
    summary = summarize_runs(runs).set_index("method")
    rows = []
    for entry in bases:
        base, with_ = integration_pair(entry)
        if base not in summary.index or with_ not in summary.index:
            continue
        b, w = summary.loc[base], summary.loc[with_]
        rows.append({
            "method": base, "seeds": int(min(b["seeds"], w["seeds"])),
            "aa_mean": b["aa_mean"], "aa_std": b["aa_std"],
            "aa_intact_mean": w["aa_mean"], "aa_intact_std": w["aa_std"],
            "delta_aa": w["aa_mean"] - b["aa_mean"],
            "forgetting_max_mean": b["forgetting_max_mean"], "forgetting_max_std": b["forgetting_max_std"],
            "forgetting_max_intact_mean": w["forgetting_max_mean"], "forgetting_max_intact_std": w["forgetting_max_std"],
        })
    return pd.DataFrame(rows)


def integration_markdown(table: pd.DataFrame, title: str | None = None) -> str:
    header = ["Method", "Seeds", "AA", "AA + InTAct", "Δ AA", "Forgetting (max-final)", "Forgetting + InTAct"]
    rows = [[f"`{r['method']}`", str(r["seeds"]), pm(r, "aa"), pm(r, "aa_intact"), f"{r['delta_aa']:+.2f}",
             pm(r, "forgetting_max"), pm(r, "forgetting_max_intact")] for _, r in table.iterrows()]
    return markdown_table(header, rows, title, NOTE)


def sensitivity_table(runs: pd.DataFrame, grid: dict[str, dict[float, str]]) -> pd.DataFrame:
    """Final AA per swept value (``grid``: lambda -> {value: run name})."""
    summary = summarize_runs(runs).set_index("method")
    rows = [
        {"lambda": key, "value": value, "method": name, "seeds": int(summary.loc[name, "seeds"]),
         "aa_mean": summary.loc[name, "aa_mean"], "aa_std": summary.loc[name, "aa_std"],
         "forgetting_max_mean": summary.loc[name, "forgetting_max_mean"], "forgetting_max_std": summary.loc[name, "forgetting_max_std"]}
        for key, points in grid.items() for value, name in points.items() if name in summary.index
    ]
    return pd.DataFrame(rows)


def sensitivity_markdown(table: pd.DataFrame, title: str | None = None) -> str:
    header = ["λ", "Value", "Seeds", "AA", "Forgetting (max-final)"]
    rows = [[r["lambda"], f"{r['value']:g}", str(r["seeds"]), pm(r, "aa"), pm(r, "forgetting_max")] for _, r in table.iterrows()]
    return markdown_table(header, rows, title, NOTE)


def write_table(table: pd.DataFrame, markdown: str, csv_path: str | Path, md_path: str | Path) -> None:
    write_text(csv_path, table.to_csv(index=False, float_format="%.4f"))
    write_text(md_path, markdown)
