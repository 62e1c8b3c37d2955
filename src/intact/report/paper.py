"""The paper's reported numbers (stored data) and our stored runs, side by side.

Two sources feed every paper-shaped table and figure:

* :func:`paper_numbers` - ``paper_numbers.yaml`` beside this module: every number the paper reports,
  each section naming the paper table it copies;
* :func:`stored_results` - the runs a config declares (``run:`` and ``studies:``) whose ``metrics.json``
  is under ``results/`` and was computed with the config's current settings (same config hash), read and
  checked by :func:`intact.results.read_run` (``metrics.json``, ``R.csv``, each task's ``eval.json`` and
  ``train.json``). Nothing else is read (no states, hypercubes or checkpoints), so a copied ``results/``
  tree gives byte-identical tables.

This module imports no torch.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Sequence

from intact.io import read_json
from intact.layering import load_file
from intact.paths import RUN_KEY, run_dir
from intact.plan import each_run
from intact.report.settings import ReportSettings
from intact.results import METRICS_JSON, StoredResults, read_run

PAPER_NUMBERS = Path(__file__).with_name("paper_numbers.yaml")

AA_NOTE = ("AA: mean top-1 accuracy (%) over all tasks after the last task, AA = (1/T) Σ_i R[i, T] "
           "(the paper's Appendix \"Metrics\").")
FORGETTING_NOTE = ("Forgetting (max-final): Chaudhry et al.'s mean over tasks i < T of max_{i ≤ j < T} R[i, j] − R[i, "
                   "T]; "
                   "the max stops before the last task, so it can be negative. Not Mammoth's (max including the last "
                   "task, ≥ 0: forgetting_mammoth in metrics.json) nor Avalanche's (R[i, i] − R[i, T] = −BWT); never "
                   "compare numbers across these definitions (docs/protocols.md, \"Forgetting\"). "
                   "The paper reports no forgetting.")


@lru_cache(maxsize=1)
def paper_numbers(path: str | Path = PAPER_NUMBERS) -> dict[str, Any]:
    """The paper's numbers (parsed ``paper_numbers.yaml``), checked for the shape the tables rely on."""
    data = load_file(path, "paper numbers file")
    for section in ("main", "ablation", "integration", "hyperparameters", "efficiency"):
        if "table" not in data.get(section, {}):
            raise ValueError(f"{path}: section {section!r} is missing or names no source table")
    for row in data["main"]["rows"] + data["integration"]["rows"]:
        for col, pair in row["aa"].items():
            if len(pair) != 2:
                raise ValueError(f"{path}: {row['method']} / {col}: expected [mean, std], got {pair}")
    return data


def benchmark_title(name: str) -> str:
    """DomainNet for ``domainnet``; our own benchmarks keep their config name."""
    return paper_numbers()["benchmarks"].get(name, name)


# --------------------------------------------------------------------------------------------------
# Stored runs


def stored_results(report: ReportSettings, root: str | Path = "results") -> StoredResults:
    """The runs a config declares (``run:`` and ``studies:``), as its ``report`` settings give them
    (:func:`intact.report.settings.report_settings`), that are stored under ``root`` with the config's current
    settings, each read and checked by :func:`~intact.results.read_run`; a run of an older config (its config hash
    differs) is skipped and counted in ``stale``."""
    out = StoredResults(backbones=dict(report.backbones), declared=report.declared, rehearsal=report.rehearsal)
    for b, m, s in each_run(report.declared):
        d = Path(run_dir(b, m, s, root))
        if not (d / METRICS_JSON).exists():
            continue
        # a run of an older config (its settings changed since) is not what the config says
        key = RUN_KEY.format(benchmark=b, method=m, seed=s)
        if read_json(d / METRICS_JSON).get("config_hash") != report.hashes[key]:
            out.stale.append(key)
            continue
        out.runs.append(dataclasses.replace(read_run(d), benchmark=b, method=m, seed=s))
    return out


def fmt(x: float | None, digits: int = 2, signed: bool = False) -> str:
    """A number as the tables print it; '—' for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


#: how our runs are labelled where the paper has no row for them
#: the labels of our methods in tables (the paper's names); a ``<method>+intact`` run is labelled
#: "<label> + InTAct" (:func:`our_label`)
OUR_LABELS = {"coda_p": "CODA-P", "l2p": "L2P", "dualprompt": "DualPrompt", "ewc": "EWC", "lwf": "LwF",
              "finetune": "Fine-tuning (prompt)", "joint": "Joint (upper bound)", "compositional_prompt": "C-Prompt",
              "consistent_prompt": "CPrompt", "ka_prompt": "KA-Prompt", "inflora": "InfLoRA", "s_prompts": "S-Prompts",
              "esn": "ESN", "coda_p+intact@preset=reference": "InTAct (reference code)"}


def our_label(run: str) -> str:
    """A run's label in a table: :data:`OUR_LABELS`, "<label> + InTAct" for a method's plain InTAct run, else the
    run's name."""
    if run in OUR_LABELS:
        return OUR_LABELS[run]
    base, plus, rest = run.partition("+intact")
    return f"{OUR_LABELS[base]} + InTAct" if plus and not rest and base in OUR_LABELS else run


def method_cell(label: str, run: str | None) -> str:
    """A row's Method cell: its label and the run it shows in backticks (the run alone where it is its own label)."""
    return f"`{run}`" if run == label else label + (f" (`{run}`)" if run else "")


def paper_pm(pair: Sequence[float] | None) -> str:
    return "—" if pair is None else f"{pair[0]:.2f} ± {pair[1]:.2f}"


def seeds_note(counts: Iterable[int | float | None], stored: StoredResults) -> str:
    """How many seeds the "here" cells average (``counts``: each cell's seed count, None / NaN where empty)."""
    counts = sorted({int(n) for n in counts if n is not None and n == n})
    if not counts:
        text = "Here: no stored runs of this config yet (only the paper's columns are filled)."
    else:
        n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
        text = (f"Here: mean ± sample std over {n} seed(s) per cell (n = its seed count; the seeds column of the "
                "CSV), from results/runs/<benchmark>/<method>/seed<k>/metrics.json.")
    if stored.stale:
        text += f" Skipped {len(stored.stale)} stored run(s) of an older config (config hash differs)."
    return text


def rows_and_labels(paper_rows: list[dict], ours: Sequence[str]) -> list[tuple[str, str | None, dict | None]]:
    """(label, our run name, paper row): the paper's rows in its order, then our runs it does not list."""
    out = [(r["method"], r.get("ours"), r) for r in paper_rows]
    mapped = {r.get("ours") for r in paper_rows}
    out += [(our_label(m), m, None) for m in ours if m not in mapped]
    return out
