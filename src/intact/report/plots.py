"""The one figure writer (:func:`write_figure`: the reports', the experiments' and MLflow's figures) and a
benchmark's picture of its tasks (drawn from its preview)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from intact.io import atomic_path  # noqa: E402


def mark(fig: plt.Figure, banner: str | None) -> None:
    """Write ``banner`` (a rehearsal's line, :func:`intact.rehearsal.banner`) across the top of ``fig``, in red."""
    if banner:
        fig.text(0.5, 1.0, banner, ha="center", va="bottom", fontsize=9, color="#b00000", weight="bold",
                 transform=fig.transFigure)


#: no timestamps or versions in a figure's file: the same figure gives the same bytes
_METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None, "ModDate": None, "Producer": None}}


def write_figure(fig: plt.Figure, paths: Sequence[str | Path], banner: str | None = None) -> None:
    """Write ``fig`` to each path (format from the suffix, PNG without one), atomically, without timestamps, and
    close it; ``banner`` (a rehearsal's line) across its top (:func:`mark`)."""
    mark(fig, banner)
    for path in map(Path, paths):
        fmt = path.suffix.lstrip(".") or "png"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight", metadata=_METADATA.get(fmt))
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
    write_figure(fig, [path], banner)
