"""The paper's efficiency table (its table of parameters, memory and time per batch) beside ours, from each
task's ``train.json``."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from intact.metrics import Stat
from intact.report.paper import (
    AA_NOTE, FORGETTING_NOTE, benchmark_title, fmt, method_cell, paper_numbers, paper_pm, rows_and_labels, seeds_note,
)
from intact.report.render import Column, Table
from intact.report.completeness import Ledger
from intact.report.tables import backbone_notes, ci_cell, ci_note, ci_record, pm_n


def efficiency_stats(runs: Sequence[Any]) -> dict[str, Stat | None]:
    """Per run from its train.json records, then mean ± std over seeds (see the table note)."""
    per: dict[str, list[float]] = {k: [] for k in ("total", "trainable", "memory", "train_batch", "inference_batch",
                                                   "images_per_s")}
    for r in runs:
        t = r.trains
        if not t or "total_parameters" not in t[-1]:
            continue  # a run stored before these fields were recorded
        per["total"].append(t[-1]["total_parameters"])
        per["trainable"].append(t[-1]["trainable_parameters"])
        per["memory"].append(max(x["peak_memory_mb"] for x in t) / 1024)
        per["train_batch"].append(sum(x["seconds"] for x in t) / sum(x["train_batches"] for x in t))
        per["inference_batch"].append(float(np.mean([x["inference_batch_seconds"] for x in t])))
        per["images_per_s"].append(sum(x["train_images"] * len(x["epochs"]) for x in t) / sum(x["seconds"] for x in t))
    return {k: Stat.of(v) for k, v in per.items()}


#: the measurements that depend on the machine: a mean over records of several machines is no measurement
MACHINE_DEPENDENT = ("memory", "train_batch", "inference_batch", "images_per_s")


def machines(runs: Sequence[Any]) -> set[str]:
    """The machines the task records of ``runs`` were measured on: a GPU's model, or a CPU run's host (every CPU
    records the device ``cpu``). On a cluster each task is a job of its own, which may land anywhere."""
    return {t["device"] if t["device"] != "cpu" else f"cpu on {(t.get('provenance') or {}).get('host', '?')}"
            for r in runs for t in r.trains if "device" in t}


def _efficiency_cells(row: Mapping[str, Any] | None, e: Mapping[str, Stat | None], aa: Stat | None) -> dict[str, str]:
    """The paper's and our cells of one efficiency row (``e``: :func:`efficiency_stats`)."""
    def here(key: str, digits: int = 2) -> str:
        return fmt(e[key].mean if e[key] else None, digits)

    return {
        "total_paper": f"{row['total_parameters']:,}" if row else "—",
        "trainable_paper": f"{row['trainable_parameters']:,}" if row else "—",
        "memory_paper": fmt(row["gpu_memory_gb"]) if row else "—",
        "batch_paper": fmt(row["batch_seconds"]) if row else "—",
        "aa_paper": paper_pm(row["aa"]) if row else "—",
        "total_here": f"{e['total'].mean:,.0f}" if e["total"] else "—",
        "trainable_here": f"{e['trainable'].mean:,.0f}" if e["trainable"] else "—",
        "memory_here": here("memory"), "train_batch_here": here("train_batch", 3),
        "inference_batch_here": here("inference_batch", 3), "images_per_s_here": here("images_per_s", 0),
        "aa_here": pm_n(aa), "aa_ci": ci_cell(aa, row["aa"][0] if row else None),
    }


def efficiency_table(ledger: Ledger, ours: Sequence[str]) -> Table:
    """Per benchmark (the paper's, then every stored one) the paper's rows and ours: parameters, memory, time per
    batch and AA; every AA read through ``ledger``."""
    stored, paper = ledger.stored, paper_numbers()["efficiency"]
    benchmarks = [paper["benchmark"]] + [b for b in stored.benchmarks() if b != paper["benchmark"]]
    G = {"total": "Total params", "trainable": "Trainable params", "memory": "Memory (GB)", "batch": "s / batch",
         "aa": "AA"}
    cols = [Column("benchmark", "Benchmark", align="l"), Column("method", "Method", align="l"),
            Column("total_paper", "paper", G["total"]), Column("total_here", "here", G["total"]),
            Column("trainable_paper", "paper", G["trainable"]), Column("trainable_here", "here", G["trainable"]),
            Column("memory_paper", "paper", G["memory"]), Column("memory_here", "here", G["memory"]),
            Column("batch_paper", "paper", G["batch"]), Column("train_batch_here", "train", G["batch"]),
            Column("inference_batch_here", "inference", G["batch"]),
            Column("images_per_s_here", "img/s train", "Throughput"),
            Column("aa_paper", "paper", G["aa"]), Column("aa_here", "here", G["aa"]),
            Column("aa_ci", "95 % CI", G["aa"])]
    table = Table("efficiency", "Efficiency: parameters, memory and time per batch", cols)
    records, devices, mixed = [], set(), []
    for b in benchmarks:
        rows = rows_and_labels(paper["rows"] if b == paper["benchmark"] else [], ours)
        first = True
        for label, run, row in rows:
            aa = ledger.stat(label, b, run)
            runs = stored.select(b, run) if aa else []
            if row is None and not runs:
                continue
            devices |= {t.get("device", "unknown") for r in runs for t in r.trains if "device" in t}
            e = efficiency_stats(runs)
            if len(where := machines(runs)) > 1:   # memory of a CPU and a GPU averaged: no measurement, a dash
                e.update(dict.fromkeys(MACHINE_DEPENDENT))
                mixed.append(f"{label} on {benchmark_title(b)} ({', '.join(sorted(where))})")
            if first:
                table.rules.add(len(table.rows))
            table.rows.append({"benchmark": benchmark_title(b) if first else "",
                               "method": method_cell(label, run), **_efficiency_cells(row, e, aa)})
            first = False
            rec = {"benchmark": b, "method": label, "run": run,
                   **{f"paper_{k}": (row[k] if row else None) for k in
                      ("total_parameters", "trainable_parameters", "gpu_memory_gb", "batch_seconds")},
                   "paper_aa": row["aa"][0] if row else None}
            for k, s in e.items():
                rec[f"here_{k}"], rec[f"here_{k}_std"] = (s.mean, s.std) if s else (None, None)
            rec["here_aa"], rec["here_seeds"] = (aa.mean, aa.n) if aa else (None, None)
            ci = ci_record(aa, row["aa"][0] if row else None)
            records.append({**rec, **{f"here_aa_{k}": v for k, v in ci.items()}})
    table.data = pd.DataFrame(records)
    table.notes = [
        f"Paper: {benchmark_title(paper['benchmark'])} on {paper['device']} (paper table {paper['table']}; baselines "
        "copied from KA-Prompt); its 'batch time' is called batch inference time in its caption.",
        "Here (mean over seeds, from each task's train.json): total / trainable parameters after the last task "
        "(frozen backbone included in the total; trainable: what the last task's optimizer trains, every task's "
        "prompts for a shared pool, one task's prompt and head for S-Prompts, CPrompt, ESN and InfLoRA); memory = "
        "peak over tasks (CUDA: max allocated; CPU: the process's max RSS, not comparable to GPU memory); s / batch: "
        "train = training seconds / optimizer steps (with the feature cache, train.json's feature_cache, the "
        "backbone passes it holds are computed before and not counted), inference = one forward of a training-size "
        "batch (query + prompted pass) in eval mode; img/s = training images per second. "
        f"Devices: {', '.join(sorted(devices)) or 'none stored'}. Timings depend on the machine and its load."
        + (f" Memory and times '—': measured on more than one machine, {'; '.join(mixed)}." if mixed else ""),
        AA_NOTE, FORGETTING_NOTE,
        seeds_note(table.data.get("here_seeds", []), stored),
        ci_note(table.data), *backbone_notes(stored),
    ]
    return table
