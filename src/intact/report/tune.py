"""The tune study's report: each search's choice (validation split) and the chosen point against its
baseline on the test split, paired seed by seed with a 95 % interval
(results/tables/<benchmark>/study_tune*.{csv,md})."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import pandas as pd

from intact.metrics import Paired, Stat
from intact.rehearsal import banner
from intact.report.paper import AA_NOTE, FORGETTING_NOTE
from intact.report.render import Column, Table, write_table
from intact.report.tables import CAPTION, paired_cells, paired_columns, paired_note, pm
from intact.results import StoredResults

NOTE = ("Search on the validation split (train minus a validation part of it; the test split is never read), "
        "choice by mean validation AA over the selection seeds; the chosen point and its baseline then train on the "
        "full train split and are evaluated on the test split. A = the chosen point, B = its baseline. "
        "val AA = the chosen point's mean ± std over the selection seeds; how decisive = its lead over the best "
        "other point against the larger of the two points' std over the selection seeds (decisive: the lead "
        "exceeds it), or a tie (the tie rule, not the data, chose) where the points' runs are identical or their "
        "means lie within the tolerance. "
        "Δ forgetting: A − B of forgetting (max-final), mean over the paired seeds (negative: the chosen point forgets "
        "less). diag = mean of R's diagonal (accuracy on a task right after learning it).")
KEYS = ("aa", "forgetting_max", "diag")


def _per_seed(stored: StoredResults, benchmark: str, method: str, key: str) -> dict[int, float]:
    if key == "diag":
        return {r.seed: r.diagonal_mean() for r in stored.select(benchmark, method)}
    return stored.values(benchmark, method, key)


def paired_rows(choice: Mapping[str, Any], stored: StoredResults, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Per seed: the chosen point's and the baseline's AA, forgetting and diag, and their differences."""
    final, base, b = choice["chosen"]["final_name"], choice["baseline"], choice["benchmark"]
    values = {(m, k): _per_seed(stored, b, m, k) for m in (final, base) if m for k in KEYS}
    rows = []
    for s in seeds:
        row: dict[str, Any] = {"run": choice["run"], "chosen": final, "baseline": base, "seed": s}
        for key in KEYS:
            row[key] = values[(final, key)][s]
            if base:
                row[f"baseline_{key}"] = values[(base, key)][s]
                row[f"delta_{key}"] = row[key] - row[f"baseline_{key}"]
        rows.append(row)
    return rows


def _summary(c: Mapping[str, Any], stored: StoredResults,
             seeds: Sequence[int]) -> tuple[dict[str, str], dict[str, Any]]:
    """One search's cells and CSV record: its choice, the chosen point's test AA, and the paired comparison."""
    final, base, b = c["chosen"]["final_name"], c["baseline"], c["benchmark"]
    per = {(m, k): {s: v for s, v in _per_seed(stored, b, m, k).items() if s in seeds}
           for m in (final, base) if m for k in KEYS}
    settings = ", ".join(f"{k}={v}" for k, v in c["chosen"]["settings"].items())
    verdict, decided = how_decisive(c)
    record = {"run": c["run"], "chosen": final, "settings": settings, "points": len(c["points"]),
              "val_aa_mean": c["chosen"]["val_aa_mean"], "val_aa_sd": c["chosen"].get("val_aa_sd"),
              "choice": verdict, "lead": decided.get("lead"), "spread": decided.get("spread"),
              "decisive": decided.get("decisive"), "identical_tie": decided.get("identical_tie"),
              "baseline": base, "seeds": len(per[(final, "aa")])}
    cells = {"run": f"`{c['run']}`", "chosen": settings or "(no settings)", "val": _val(c["chosen"]),
             "choice": verdict, "test": pm(Stat.of(list(per[(final, "aa")].values())))}
    for key in KEYS:
        record[f"{key}_mean"] = Stat.of(list(per[(final, key)].values())).mean
    if not base:
        return {**cells, "diag": f"{record['diag_mean']:.2f}"}, record
    paired = {k: Paired.of(per[(final, k)], per[(base, k)]) for k in KEYS}
    for key, p in paired.items():
        record.update({f"baseline_{key}_mean": Stat.of(list(per[(base, key)].values())).mean,
                       f"delta_{key}_mean": p.stat.mean, f"delta_{key}_sd": p.stat.std})
    low, high = paired["aa"].interval() or (None, None)
    record.update(delta_aa_ci_low=low, delta_aa_ci_high=high, better_seeds=paired["aa"].better)
    cells.update({"baseline": f"`{base}`", "baseline_aa": pm(Stat.of(list(per[(base, "aa")].values()))),
                  **paired_cells(paired["aa"]), "forgetting": f"{paired['forgetting_max'].stat.mean:+.2f}",
                  "diag": f"{record['diag_mean']:.2f} / {record['baseline_diag_mean']:.2f}"})
    return cells, record


def _val(chosen: Mapping[str, Any]) -> str:
    sd = chosen.get("val_aa_sd")
    return f"{chosen['val_aa_mean']:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")


def how_decisive(choice: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The choice's verdict in words (:func:`intact.tune.decisiveness`) and its record: a tie between identical
    runs, a lead over the runner-up that exceeds the points' spread over the selection seeds, or one that
    does not."""
    d = choice.get("decisiveness") or {}
    if d.get("identical_tie"):
        twins = ", ".join(str(i) for i in choice["chosen"]["identical_to"])
        return f"tie: runs identical to point(s) {twins}; the tie rule ({choice['tie']}) picked", d
    if d.get("lead") is None:
        return "one point", d
    others = [str(i) for i in choice.get("tied", ()) if i != choice["chosen"]["index"]]
    if others:  # within `tolerance` of the best: the tie rule chose, whatever the lead says
        return (f"tie within tolerance {choice['tolerance']:g} with point(s) {', '.join(others)}; the tie rule "
                f"({choice['tie']}) picked", d)
    sign = ">" if d["decisive"] else "≤"
    word = "decisive" if d["decisive"] else "not decisive"
    return f"{word}: lead {d['lead']:.2f} {sign} spread {d['spread']:.2f} over point {d['runner_up']['index']}", d


def write_tune_report(choices: Sequence[Mapping[str, Any]], stored: StoredResults, seeds: Sequence[int],
                      outputs: Mapping[str, str | Path], benchmark: str) -> pd.DataFrame:
    """The study's tables: the summary (csv, md), every search point (search) and the paired seeds (paired)."""
    search = pd.DataFrame([{"run": c["run"], "point": p["name"], "final_name": p["final_name"],
                            **{f"setting.{k}": v for k, v in p["settings"].items()},
                            **{f"val_aa_seed{s}": a for s, a in zip(c["selection_seeds"], p["val_aa"])},
                            "val_aa_mean": p["val_aa_mean"], "val_aa_sd": p.get("val_aa_sd"),
                            "val_forgetting_mean": p["val_forgetting_mean"],
                            "identical_to": " ".join(map(str, p.get("identical_to", []))),
                            "chosen": p["index"] == c["chosen"]["index"]} for c in choices for p in c["points"]])
    paired = pd.DataFrame([r for c in choices for r in paired_rows(c, stored, seeds)])
    cols = [Column("run", "run", align="l"), Column("chosen", "chosen on validation", align="l"),
            Column("val", "val AA"), Column("choice", "how decisive", align="l"), Column("test", "test AA"),
            Column("baseline", "baseline", align="l"),
            Column("baseline_aa", "baseline AA"), *paired_columns(better="better"),
            Column("forgetting", "Δ forgetting"), Column("diag", "diag (chosen / baseline)")]
    table = Table("study_tune", f"Tuned runs - {benchmark} (seeds {', '.join(map(str, seeds))}; chosen vs baseline "
                                f"{CAPTION})", cols)
    rows = [_summary(c, stored, seeds) for c in choices]
    table.rows = [cells for cells, _ in rows]
    table.data = pd.DataFrame([record for _, record in rows])
    table.notes = [NOTE, paired_note(), AA_NOTE, FORGETTING_NOTE]
    mark = banner(stored.is_rehearsal)
    write_table(table, outputs["csv"], outputs["md"], banner=mark)
    for key, frame in (("search", search), ("paired", paired)):
        write_table(Table(f"study_tune_{key}", key, [], data=frame, float_format="%.4f"), outputs[key], banner=mark)
    return table.data
