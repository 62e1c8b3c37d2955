"""A picture of a benchmark's domains, and the figure writer of the experiments (the reports' figures:
:mod:`intact.report.figures`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from intact.io import atomic_path  # noqa: E402


def save_figure(fig: "plt.Figure", path: str | Path) -> None:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=150, bbox_inches="tight")
    plt.close(fig)


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
