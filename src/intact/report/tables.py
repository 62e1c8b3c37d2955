"""Aggregated tables (mean +- std over seeds), written as CSV and Markdown."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from intact.io import write_text

#: metric key -> column title (the forgetting definition is named in every table)
METRICS = {
    "aa": "AA",
    "forgetting_max": "Forgetting (max-final)",
    "forgetting_one_step": "Forgetting (one-step)",
    "bwt": "BWT",
    "caa": "CAA",
}


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


def to_markdown(summary: pd.DataFrame, metrics: dict[str, str] = METRICS, title: str | None = None, note: str | None = None) -> str:
    """A GitHub-flavoured Markdown table with ``mean ± std`` cells."""
    optional = [(c, t) for c, t in (("certificate_last_mean", "Certificate (last task)"), ("train_seconds_mean", "Train s / run")) if c in summary]
    head = ["Method", "Seeds", *metrics.values(), *(t for _, t in optional)]
    lines = []
    if title:
        lines += [f"### {title}", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for _, r in summary.iterrows():
        cells = [f"`{r['method']}`", str(int(r["seeds"]))]
        cells += [f"{r[f'{k}_mean']:.2f} ± {r[f'{k}_std']:.2f}" for k in metrics]
        for col, _ in optional:
            cells.append("n/a" if np.isnan(r[col]) else f"{r[col]:.3g}")
        lines.append("| " + " | ".join(cells) + " |")
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def write_table(summary: pd.DataFrame, csv_path: str | Path, md_path: str | Path, **md_kwargs: object) -> None:
    write_text(csv_path, summary.to_csv(index=False, float_format="%.4f"))
    write_text(md_path, to_markdown(summary, **md_kwargs))
