"""Figures: AA evolution per method, and a picture of the benchmark's domains."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from intact.io import atomic_path  # noqa: E402


def save_figure(fig: "plt.Figure", path: str | Path) -> None:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=150, bbox_inches="tight")
    plt.close(fig)


def aa_evolution_plot(runs: pd.DataFrame, path: str | Path, methods: Sequence[str] | None = None, title: str | None = None) -> None:
    """Mean AA after each task (over the tasks seen so far), with a +-1 std band over seeds."""
    order = list(methods) if methods is not None else list(dict.fromkeys(runs["method"]))
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    names = None
    for method in order:
        sub = runs[runs["method"] == method]
        if sub.empty:
            continue
        curves = np.array(sub["aa_evolution"].tolist(), dtype=float)
        mean, std = curves.mean(0), curves.std(0, ddof=1) if len(curves) > 1 else np.zeros(curves.shape[1])
        x = np.arange(1, curves.shape[1] + 1)
        ax.plot(x, mean, marker="o", ms=3, label=f"{method} (n={len(curves)})")
        ax.fill_between(x, mean - std, mean + std, alpha=0.2)
        names = sub["task_names"].iloc[0]
    if names is not None:
        ax.set_xticks(np.arange(1, len(names) + 1))
        ax.set_xticklabels([f"{i + 1}\n{n}" for i, n in enumerate(names)], fontsize=7)
    ax.set_xlabel("after task")
    ax.set_ylabel("average accuracy over seen tasks (%)")
    ax.set_title(title or "AA evolution")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def domain_preview(clean: np.ndarray, domains: dict[str, np.ndarray], labels: np.ndarray, path: str | Path) -> None:
    """A grid: the clean images on top, then one row per domain (the same images transformed)."""
    rows = {"clean": clean, **domains}
    n = clean.shape[0]
    fig, axes = plt.subplots(len(rows), n, figsize=(0.8 * n + 1.2, 0.8 * len(rows)))
    for r, (name, imgs) in enumerate(rows.items()):
        for c in range(n):
            ax = axes[r, c]
            ax.imshow(imgs[c, 0], cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
            if r == 0:
                ax.set_title(str(labels[c]), fontsize=8)
    save_figure(fig, path)


_LAMBDA_TITLES = {"lambda_intdrift": r"$\lambda_{IntDrift}$", "lambda_feat": r"$\lambda_{Feat}$",
                  "lambda_var": r"$\lambda_{Var}$", "lambda_align": r"$\lambda_{Align}$"}


def _sensitivity_panel(ax: "plt.Axes", runs: pd.DataFrame, points: dict[float, str], key: str) -> None:
    cmap = plt.get_cmap("viridis")
    for i, (value, name) in enumerate(sorted(points.items())):
        sub = runs[runs["method"] == name]
        if sub.empty:
            continue
        curves = np.array(sub["aa_evolution"].tolist(), dtype=float)
        x = np.arange(1, curves.shape[1] + 1)
        ax.plot(x, curves.mean(0), marker="o", ms=3, color=cmap(i / max(len(points) - 1, 1)),
                label=f"{value:g} (AA {curves[:, -1].mean():.1f})")
    ax.set_title(f"Sensitivity to {_LAMBDA_TITLES.get(key, key)}")
    ax.set_xlabel("after task")
    ax.set_ylabel("AA over seen tasks (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, title=_LAMBDA_TITLES.get(key, key), title_fontsize=8)


def sensitivity_plots(runs: pd.DataFrame, grid: dict[str, dict[float, str]], combined: str | Path, per_family: dict[str, str | Path]) -> None:
    """AA evolution per lambda value (mean over seeds): one figure per lambda family and all panels side by side."""
    for key, points in grid.items():
        fig, ax = plt.subplots(figsize=(5.0, 3.8))
        _sensitivity_panel(ax, runs, points, key)
        save_figure(fig, per_family[key])
    fig, axes = plt.subplots(1, len(grid), figsize=(5.0 * len(grid), 3.8), squeeze=False)
    for ax, (key, points) in zip(axes[0], grid.items()):
        _sensitivity_panel(ax, runs, points, key)
    save_figure(fig, combined)
