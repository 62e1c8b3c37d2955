"""The paper's toy (Fig. 2): an MLP fits a 1-D Gaussian bump over three sequential tasks, each a
contiguous segment of x, with and without InTAct (every Linear protected against its input's box).

The InTAct run uses L_IntDrift only: with one input dimension the other terms have nothing to act on
(L_Feat needs a feature extractor, L_Var / L_Align reshape the hidden boxes, not the fit). The box of
the first Linear is the interval of x the task covered (``percentile`` 0: from its smallest to its
largest sample), which is what the figure shades.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from intact.io import write_json
from intact.models.networks import mlp
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.regularizer import IntactRegularizer
from intact.report.plots import plt, write_figure
from intact.report.render import Column, Table, write_table
from intact.settings import IntactConfig, plain
from intact.settings.experiments import ToyConfig

METHODS = ("finetune", "intact")


def target(x: torch.Tensor, sigma: float) -> torch.Tensor:
    return torch.exp(-x.pow(2) / (2 * sigma**2))


def run_toy(cfg: ToyConfig, method: str) -> dict[str, Any]:
    """Train ``method`` over the segments; the fit on a grid after every task and each task's interval."""
    if method not in METHODS:
        raise ValueError(f"toy method {method!r}: expected one of {METHODS}")
    torch.manual_seed(cfg.seed)
    model = mlp(1, cfg.hidden, 1)
    lam = cfg.lambda_intdrift if method == "intact" else 0.0
    intact = IntactConfig(lambda_intdrift=lam, lambda_feat=0.0, lambda_var=0.0, lambda_align=0.0,
                          percentile=cfg.percentile)
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    reg = IntactRegularizer(intact, model, linears)
    lo, hi = cfg.segments[0][0], cfg.segments[-1][1]
    grid = torch.linspace(lo, hi, cfg.grid_points).unsqueeze(1)
    g = torch.Generator().manual_seed(cfg.seed)
    fits, intervals = [], []
    for task, (a, b) in enumerate(cfg.segments):
        x = a + (b - a) * torch.rand(cfg.samples_per_task, 1, generator=g)
        y = target(x, cfg.sigma)
        reg.begin_task(task)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        # cosine decay: with Adam the residual drift scales with the learning rate, not with lambda
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / cfg.steps)))
        model.train()
        for _ in range(cfg.steps):
            loss = F.mse_loss(model(x), y)
            for value in reg.penalty().values():
                loss = loss + value
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        acts = reg.collect(model, [x])
        box = Hypercube.from_activations(acts[linears[0]], cfg.percentile)
        intervals.append((float(box.lower), float(box.upper)))
        reg.end_task(task, acts)
        with torch.no_grad():
            fits.append(model(grid).squeeze(1))
    return {"grid": grid.squeeze(1), "fits": torch.stack(fits), "intervals": intervals}


def drift_table(results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows (method, after task t, earlier task i): max |f_t - f_(t-1)| over task i's interval."""
    rows = []
    for method, r in results.items():
        grid, fits = r["grid"], r["fits"]
        for t in range(1, len(fits)):
            for i in range(t):
                a, b = r["intervals"][i]
                inside = (grid >= a) & (grid <= b)
                rows.append({"method": method, "after_task": t + 1, "interval_of_task": i + 1, "lower": a, "upper": b,
                             "max_abs_change": float((fits[t] - fits[t - 1])[inside].abs().max())})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Largest change inside any earlier interval, per method, and InTAct's as a fraction of fine-tuning's."""
    worst = {m: max(r["max_abs_change"] for r in rows if r["method"] == m) for m in {r["method"] for r in rows}}
    out = {f"{m}_max_drift": v for m, v in sorted(worst.items())}
    if "intact" in worst and "finetune" in worst:
        out["intact_over_finetune"] = worst["intact"] / worst["finetune"]
    return out


def plot_toy(results: Mapping[str, Mapping[str, Any]], cfg: ToyConfig, path) -> None:
    """Three panels (after each task): the true function, both fits, the protected intervals shaded."""
    n = len(cfg.segments)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), sharey=True)
    styles = {"finetune": ("tab:red", "fine-tuning"), "intact": ("tab:blue", "InTAct")}
    any_r = next(iter(results.values()))
    grid = any_r["grid"]
    for t, ax in enumerate(axes):
        for i in range(t + 1):
            a, b = any_r["intervals"][i] if "intact" not in results else results["intact"]["intervals"][i]
            earlier = i < t
            ax.axvspan(a, b, color="tab:green" if earlier else "0.5", alpha=0.18 if earlier else 0.12, zorder=0, lw=0,
                       label=("interval of an earlier task (protected)" if i == 0 else None) if earlier else
                       ("this task's interval" if t == len(axes) - 1 else None))
        ax.plot(grid, target(grid, cfg.sigma), "k--", lw=1.5, label="true function")
        for m, r in results.items():
            color, label = styles[m]
            # fine-tuning wide underneath: after task 1 both runs are the same fit
            ax.plot(grid, r["fits"][t], color=color, lw=3.5 if m == "finetune" else 1.8, label=label,
                    zorder=2 if m == "finetune" else 3)
        ax.set_title(f"after task {t + 1} (trained on x in [{cfg.segments[t][0]:g}, {cfg.segments[t][1]:g}])",
                     fontsize=10)
        ax.set_xlabel("x")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("f(x)")
    handles, labels = axes[-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    write_figure(fig, [path])


def study_toy(tcfg: ToyConfig, figure: Path, table_csv: Path, table_md: Path,
              summary_json: Path) -> dict[str, float]:
    """Both runs of ``experiments.toy`` (its typed settings), the three-panel figure, the drift table (CSV +
    Markdown) and its summary."""
    import pandas as pd

    results = {m: run_toy(tcfg, m) for m in METHODS}
    rows = drift_table(results)
    plot_toy(results, tcfg, figure)
    out = summary(rows)
    cols = [Column(k, title, align="") for k, title in (("method", "method"), ("after_task", "after task"),
            ("interval_of_task", "interval of task"), ("x", "x in"), ("change", "max abs change of f"))]
    table = Table("toy", "Toy (Fig. 2): largest |f_t(x) - f_(t-1)(x)| inside each earlier task's interval", cols,
                  data=pd.DataFrame(rows), float_format="%.6g", level=1,
                  notes=["\n".join(f"{k}: {v:.4g}" for k, v in out.items())])
    table.rows = [{"method": r["method"], "after_task": str(r["after_task"]),
                   "interval_of_task": str(r["interval_of_task"]), "x": f"[{r['lower']:.2f}, {r['upper']:.2f}]",
                   "change": f"{r['max_abs_change']:.4f}"} for r in rows]
    write_table(table, table_csv, table_md)
    write_json(summary_json, {**out, "config": plain(tcfg)})
    return out
