"""Sample picture of a prepared image benchmark: one row per task, test images as the network sees them."""

from __future__ import annotations

from pathlib import Path

from intact.data.stored import ImageBenchmark


def task_preview(bench: ImageBenchmark, path: str | Path, per_task: int = 8) -> None:
    """A grid with one row per task (its name and train/test counts) of ``per_task`` test images."""
    from intact.report.plots import plt, save_figure

    images, labels = bench.preview(per_task)
    tasks = bench.manifest["tasks"]
    cols = max(len(v) for v in images.values())
    fig, axes = plt.subplots(len(images), cols, figsize=(1.1 * cols + 1.8, 1.15 * len(images)), squeeze=False)
    for r, (name, imgs) in enumerate(images.items()):
        for c in range(cols):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c < len(imgs):
                ax.imshow(imgs[c], interpolation="nearest")
                ax.set_title(f"class {labels[name][c]}", fontsize=6, pad=2)
            else:
                ax.axis("off")
            if c == 0:
                t = tasks[r]
                ax.set_ylabel(f"{name}\n{t['train']:,} / {t['test']:,}", rotation=0, ha="right", va="center", fontsize=7)
    fig.suptitle(f"{bench.name}: test images per task (train / test counts)", fontsize=9)
    save_figure(fig, path)
