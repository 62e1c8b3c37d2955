"""A benchmark's picture of its tasks (drawn from its preview), and the figure writer of the experiments (the
reports' figures: :mod:`intact.report.figures`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from intact.io import atomic_path  # noqa: E402


def mark(fig: plt.Figure, banner: str | None) -> None:
    """Write ``banner`` (a rehearsal's line, :func:`intact.rehearsal.banner`) across the top of ``fig``, in red."""
    if banner:
        fig.text(0.5, 1.0, banner, ha="center", va="bottom", fontsize=9, color="#b00000", weight="bold",
                 transform=fig.transFigure)


def save_figure(fig: plt.Figure, path: str | Path, banner: str | None = None) -> None:
    mark(fig, banner)
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=150, bbox_inches="tight")
    plt.close(fig)


def draw_preview(bench: Any, path: str | Path, banner: str | None = None) -> None:
    """A benchmark's picture of its tasks (``results/figures/<benchmark>/domains.png``): its
    :class:`~intact.data.base.Preview` as a grid, one row of images per entry, each titled with its class."""
    preview = bench.preview()
    cols = max(len(v) for v in preview.rows.values())
    fig, axes = plt.subplots(len(preview.rows), cols, figsize=(1.1 * cols + 1.8, 1.15 * len(preview.rows)),
                             squeeze=False)
    for r, (name, images) in enumerate(preview.rows.items()):
        for c, ax in enumerate(axes[r]):
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(images):
                ax.axis("off")
                continue
            grey = images[c].shape[-1] == 1
            ax.imshow(images[c][..., 0] if grey else images[c], cmap="gray" if grey else None, vmin=0, vmax=1,
                      interpolation="nearest")
            ax.set_title(f"class {preview.labels[name][c]}", fontsize=6, pad=2)
        note = preview.notes.get(name)
        axes[r, 0].set_ylabel(f"{name}\n{note}" if note else name, rotation=0, ha="right", va="center", fontsize=7)
    if preview.title:
        fig.suptitle(preview.title, fontsize=9)
    save_figure(fig, path, banner)
