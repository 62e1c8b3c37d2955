"""The drift experiment's outputs: the figure (drift vs task, per method, one panel per hidden layer), the
drift table and the accuracy matrices R (mean over seeds), from :func:`intact.experiments.drift.run_drift`."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Mapping

import numpy as np
import pandas as pd
from tqdm import tqdm

from intact.experiments.drift import HIDDEN, METHODS, mean_drift_curves, run_drift, split_tasks
from intact.metrics import Stat
from intact.settings import plain
from intact.settings.experiments import DriftConfig
from intact.io import write_json
from intact.report.plots import plt, write_figure
from intact.report.render import Column, Table, write_table

LABELS = {"finetune": "fine-tuning", "lwf": "LwF", "intact": "InTAct"}
COLORS = {"finetune": "tab:red", "lwf": "tab:orange", "intact": "tab:blue"}
LAYER_TITLES = {"fc1": "hidden layer 1 (L_Feat's feature)", "fc2": "hidden layer 2"}


def plot_drift(curves: Mapping[str, Mapping[str, np.ndarray]], path: Path, title: str) -> None:
    """Mean (line) and min-max over seeds (band) of the drift after each task, per method and layer."""
    fig, axes = plt.subplots(1, len(HIDDEN), figsize=(5.2 * len(HIDDEN), 3.8), sharey=True)
    for ax, layer in zip(axes, HIDDEN):
        for method, per_layer in curves.items():
            c = per_layer[layer][:, 1:]
            tasks = np.arange(2, c.shape[1] + 2)
            ax.plot(tasks, c.mean(0), "o-", color=COLORS[method], lw=2, label=LABELS[method])
            ax.fill_between(tasks, c.min(0), c.max(0), color=COLORS[method], alpha=0.15, lw=0)
        ax.set_title(LAYER_TITLES[layer], fontsize=10)
        ax.set_xlabel("after training task")
        ax.set_xticks(tasks)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("normalised L1 drift on earlier tasks' samples")
    axes[0].legend(frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    write_figure(fig, [path])


def _r_table(R: np.ndarray, method: str, aa: Stat) -> Table:
    """R of one method, its AA (mean ± sample std over seeds) beneath; R.md ends, as it always did, with a blank
    line (the last note's)."""
    T = R.shape[0]
    table = Table(method, LABELS[method], [Column("task", "task \\ after", align=""),
                                           *(Column(str(t), str(t + 1), align="") for t in range(T))], level=3)
    table.rows = [{"task": str(i + 1), **{str(t): f"{R[i, t]:.1f}" for t in range(T)}} for i in range(T)]
    table.notes = [f"AA {aa.mean:.1f} ± {aa.std:.1f} (n={aa.n})\n"]
    return table


def _drift_table(table: pd.DataFrame, seeds: int) -> Table:
    """The drift per layer, method and task (the mean over seeds) as a grid; every number in its CSV."""
    wide = table.pivot_table(index=["layer", "method"], columns="after_task", values="drift_mean", sort=False)
    cols = [Column("layer", "layer", align=""), Column("method", "method", align=""),
            *(Column(str(t), f"after task {t}", align="") for t in wide.columns)]
    out = Table("drift", "Normalised L1 drift of hidden activations on earlier tasks' samples (mean over "
                f"{seeds} seeds)", cols, data=table, float_format="%.6g", level=1)
    out.rows = [{"layer": f"hidden {layer[-1]} (input of {layer})", "method": LABELS[m],
                 **{str(t): f"{v:.3f}" for t, v in zip(wide.columns, vals)}} for (layer, m), vals in wide.iterrows()]
    return out


def study_drift(dcfg: DriftConfig, figure: Path, drift_csv: Path, drift_md: Path, r_md: Path,
                summary_json: Path, progress: bool = True) -> dict[str, Any]:
    """Every method x seed of ``experiments.drift`` (its typed settings); the figure, the drift table, R and a
    summary."""
    tasks = split_tasks(dcfg)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}
    jobs = [(m, s) for m in METHODS for s in dcfg.seeds]
    for method, seed in tqdm(jobs, desc="study_drift", disable=not progress):
        runs[method].append(run_drift(dcfg, tasks, method, seed))
    curves = mean_drift_curves(runs)
    source = "MNIST" if dcfg.mnist_path else "scikit-learn digits"
    plot_drift(curves, figure, f"Internal drift, Split-{source} (DIL), mean and range over {len(dcfg.seeds)} seeds")

    rows = []
    for method in METHODS:
        for layer in HIDDEN:
            c = curves[method][layer]
            for t in range(1, c.shape[1]):
                rows.append({"method": method, "layer": layer, "after_task": t + 1, "drift_mean": float(c[:, t].mean()),
                             "drift_std": Stat.of(c[:, t]).std})
    write_table(_drift_table(pd.DataFrame(rows), len(dcfg.seeds)), drift_csv, drift_md)

    summary: dict[str, Any] = {"source": source, "seeds": list(dcfg.seeds), "config": plain(dcfg)}
    matrices = Table("R", f"Accuracy matrices R (%; rows: task, columns: after task; mean over {len(dcfg.seeds)} "
                          "seeds; left of the diagonal: a task before it was trained)", [], level=1)
    for method in METHODS:
        R = np.mean([r["R"] for r in runs[method]], axis=0)
        aa = Stat.of([r["metrics"]["aa"] for r in runs[method]])
        matrices.blocks.append(_r_table(R, method, aa))
        summary[method] = {"aa_mean": aa.mean, "aa_std": aa.std, "R_mean": R.tolist(),
                           "final_drift": {layer: float(curves[method][layer][:, -1].mean()) for layer in HIDDEN}}
    write_table(matrices, md=r_md)
    write_json(summary_json, summary)
    return summary
