"""The tune study's report: each search's choice (validation split) and the chosen point against its
baseline on the test split, paired seed by seed (results/tables/<benchmark>/study_tune*.{csv,md})."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from intact.io import write_text
from intact.report.tables import markdown_table

NOTE = ("Search on the validation split (train minus a validation part of it; the test split is never read), "
        "choice by mean validation AA over the selection seeds; the chosen point and its baseline then train on the "
        "full train split and are evaluated on the test split. Δ = chosen − baseline, paired by seed (mean ± sd). "
        "diag = mean of R's diagonal (accuracy on a task right after learning it).")


def diagonal_mean(r_csv: str | Path) -> float:
    """Mean of R's diagonal: how well each task is learned when it is learned (plasticity)."""
    R = pd.read_csv(r_csv, index_col=0).to_numpy()
    return float(np.mean(np.diag(R)))


def run_rows(metrics_paths: Sequence[str | Path]) -> pd.DataFrame:
    """method, seed, aa, forgetting_max and diag of each run (R.csv beside its metrics.json)."""
    from intact.io import read_json

    rows = []
    for p in metrics_paths:
        m = read_json(p)
        rows.append({"method": m["method"], "seed": int(m["seed"]), "eval_split": m["eval_split"], "aa": m["aa"],
                     "forgetting_max": m["forgetting_max"], "diag": diagonal_mean(Path(p).with_name("R.csv"))})
    return pd.DataFrame(rows)


def _values(runs: pd.DataFrame, method: str, seeds: Sequence[int], key: str) -> np.ndarray:
    sub = runs[(runs["method"] == method) & (runs["eval_split"] == "test")].set_index("seed")
    return np.array([float(sub.loc[s, key]) for s in seeds])


def _ms(x: np.ndarray, sign: str = "") -> str:
    return f"{x.mean():{sign}.2f} ± {x.std(ddof=1) if len(x) > 1 else 0.0:.2f}"


def paired_rows(choice: Mapping[str, Any], runs: pd.DataFrame, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Per seed: the chosen point's and the baseline's AA, forgetting and diag, and their differences."""
    final, base = choice["chosen"]["final_name"], choice["baseline"]
    rows = []
    for s in seeds:
        row: dict[str, Any] = {"run": choice["run"], "chosen": final, "baseline": base, "seed": s}
        for key in ("aa", "forgetting_max", "diag"):
            row[key] = float(_values(runs, final, [s], key)[0])
            if base:
                row[f"baseline_{key}"] = float(_values(runs, base, [s], key)[0])
                row[f"delta_{key}"] = row[key] - row[f"baseline_{key}"]
        rows.append(row)
    return rows


def write_tune_report(choices: Sequence[Mapping[str, Any]], runs: pd.DataFrame, seeds: Sequence[int],
                      outputs: Mapping[str, str | Path], benchmark: str) -> pd.DataFrame:
    """The study's tables: the summary (csv, md), every search point (search) and the paired seeds (paired)."""
    search = pd.DataFrame([{"run": c["run"], "point": p["name"], "final_name": p["final_name"],
                            **{f"setting.{k}": v for k, v in p["settings"].items()},
                            **{f"val_aa_seed{s}": a for s, a in zip(c["selection_seeds"], p["val_aa"])},
                            "val_aa_mean": p["val_aa_mean"], "val_forgetting_mean": p["val_forgetting_mean"],
                            "chosen": p["index"] == c["chosen"]["index"]} for c in choices for p in c["points"]])
    paired = pd.DataFrame([r for c in choices for r in paired_rows(c, runs, seeds)])
    summary, md_rows = [], []
    for c in choices:
        sub = paired[paired["run"] == c["run"]]
        settings = ", ".join(f"{k}={v}" for k, v in c["chosen"]["settings"].items())
        row = {"run": c["run"], "chosen": c["chosen"]["final_name"], "settings": settings, "points": len(c["points"]),
               "val_aa_mean": c["chosen"]["val_aa_mean"], "baseline": c["baseline"], "seeds": len(sub)}
        for key in ("aa", "forgetting_max", "diag"):
            row[f"{key}_mean"] = float(sub[key].mean())
            if c["baseline"]:
                d = sub[f"delta_{key}"].to_numpy()
                row[f"baseline_{key}_mean"] = float(sub[f"baseline_{key}"].mean())
                row[f"delta_{key}_mean"], row[f"delta_{key}_sd"] = float(d.mean()), float(d.std(ddof=1)) if len(d) > 1 else 0.0
        row["better_seeds"] = int((sub["delta_aa"] > 0).sum()) if c["baseline"] else None
        summary.append(row)
        md_rows.append(_markdown_row(c, sub, settings))
    table = pd.DataFrame(summary)
    write_text(outputs["csv"], table.to_csv(index=False, float_format="%.4f"))
    write_text(outputs["search"], search.to_csv(index=False, float_format="%.4f"))
    write_text(outputs["paired"], paired.to_csv(index=False, float_format="%.4f"))
    header = ["run", "chosen on validation", "val AA", "test AA", "baseline", "baseline AA", "Δ AA per seed",
              "Δ AA", "better", "Δ forgetting", "diag (chosen / baseline)"]
    write_text(outputs["md"], markdown_table(header, md_rows, f"Tuned runs - {benchmark} (seeds {', '.join(map(str, seeds))})", NOTE))
    return table


def _markdown_row(c: Mapping[str, Any], sub: pd.DataFrame, settings: str) -> list[str]:
    aa = sub["aa"].to_numpy()
    row = [f"`{c['run']}`", settings or "(no settings)", f"{c['chosen']['val_aa_mean']:.2f}", _ms(aa)]
    if not c["baseline"]:
        return row + ["", "", "", "", "", "", f"{sub['diag'].mean():.2f}"]
    d = sub["delta_aa"].to_numpy()
    return row + [f"`{c['baseline']}`", _ms(sub["baseline_aa"].to_numpy()), " / ".join(f"{x:+.2f}" for x in d), _ms(d, "+"),
                  f"{int((d > 0).sum())} of {len(d)}", f"{sub['delta_forgetting_max'].mean():+.2f}",
                  f"{sub['diag'].mean():.2f} / {sub['baseline_diag'].mean():.2f}"]
