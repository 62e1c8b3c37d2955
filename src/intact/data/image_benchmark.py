"""The class every prepared image benchmark opens with; a type adds ``plan`` (its split lists).

Torch-free to import (a declaration module subclasses it at module level; numpy and the torch datasets
are imported where a job reads the arrays).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from intact.data.base import Benchmark, Preview
from intact.data.image_config import ImageBenchmarkConfig

if TYPE_CHECKING:
    from intact.data.prepared import PreparedImages


class ImageBenchmark(Benchmark):
    """Opens a prepared image benchmark from its ``manifest.json``; the type modules add ``plan``."""

    def __init__(self, manifest_path: str | Path):
        super().__init__(manifest_path)
        self._arrays: dict[str, Any] = {}
        # the declared defaults until a run gives its own (use_settings, use_view)
        self.val_fraction, self.val_seed = ImageBenchmarkConfig.val_fraction, ImageBenchmarkConfig.val_seed
        self.random_resized, self.test_resize = False, None

    @property
    def image_size(self) -> int:
        return int(self.manifest["image_size"])

    def _array(self, rel: str) -> Any:
        import numpy as np

        if rel not in self._arrays:
            self._arrays[rel] = np.load(self.root / rel, mmap_mode="r", allow_pickle=False)
        return self._arrays[rel]

    def _split(self, task: int, split: str, augment: bool) -> PreparedImages:
        import numpy as np

        from intact.data.prepared import PreparedImages

        files = self.manifest["tasks"][task]["arrays"][split]
        y = np.asarray(self._array(files["y"]))
        return PreparedImages(self._array(files["x"]), y, self.image_size, augment, task, **self._view(task))

    def _view(self, task: int) -> dict[str, Any]:
        """How the run reads task ``task``'s images (:meth:`use_view`) and the side they were resized to."""
        return {"resize": self.manifest["tasks"][task].get("resize"), "random_resized": self.random_resized,
                "test_resize": self.test_resize}

    def use_settings(self, cfg: ImageBenchmarkConfig) -> None:
        """Take the run's validation part (``val_fraction``, ``val_seed``): applied when data is read."""
        # a type whose settings declare no validation part (a plugin's) keeps the defaults
        self.val_fraction = getattr(cfg, "val_fraction", self.val_fraction)
        self.val_seed = getattr(cfg, "val_seed", self.val_seed)

    def use_view(self, train_crop: str, test_resize: int | None) -> None:
        """Take the run's view of the prepared images (``optim.train_crop``, ``optim.test_resize``; see
        :class:`~intact.data.prepared.PreparedImages`): applied when data is read."""
        self.random_resized, self.test_resize = train_crop == "random_resized", test_resize

    def _val_split(self, task: int, part: str) -> PreparedImages:
        """``train`` (the train list minus the validation part) or ``val`` (that part, unaugmented): rows
        outside the part get label -1, which PreparedImages skips like an unreadable image."""
        import numpy as np

        from intact.data.prepared import PreparedImages, task_val_seed, val_rows

        files = self.manifest["tasks"][task]["arrays"]["train"]
        y = np.array(self._array(files["y"]))
        rows = val_rows(y, self.val_fraction, task_val_seed(self.val_seed, self.task_names[task]))
        keep = np.zeros(len(y), dtype=bool)
        keep[rows] = True
        y[keep if part == "train" else ~keep] = -1
        return PreparedImages(self._array(files["x"]), y, self.image_size, part == "train", task, **self._view(task))

    def train_set(self, task: int, eval_split: str = "test") -> PreparedImages:
        if eval_split == "val":
            return self._val_split(task, "train")
        return self._split(task, "train", augment=True)

    def eval_set(self, task: int, eval_split: str = "test") -> PreparedImages:
        if eval_split == "val":
            return self._val_split(task, "val")
        return self._split(task, "test", augment=False)

    def preview(self, per_task: int = 8) -> Preview:
        """Up to ``per_task`` test images per task (evenly spaced through the list), centre-cropped, with their
        classes; each task's train / test counts under its name."""
        import numpy as np

        images, labels, notes = {}, {}, {}
        for t, name in enumerate(self.task_names):
            data = self.eval_set(t)
            idx = np.linspace(0, len(data) - 1, num=min(per_task, len(data))).astype(np.int64)
            images[name] = np.stack([data[int(i)][0].permute(1, 2, 0).numpy() for i in idx])
            labels[name] = [int(data.labels[int(i)]) for i in idx]
            task = self.manifest["tasks"][t]
            notes[name] = f"{task['train']:,} / {task['test']:,}"
        return Preview(f"{self.name}: test images per task (train / test counts)", images, labels, notes)

    @classmethod
    def plan(cls, cfg: ImageBenchmarkConfig) -> tuple[list, list[dict]]:
        """The tasks' split lists (and the list files read, with sha256) of ``cfg``: per type. ``cfg`` is the type's
        settings; preparing reads its ``name``, ``type``, ``tasks``, ``num_classes``, ``image_size`` and
        ``skip_unreadable``."""
        raise NotImplementedError

    @classmethod
    def prepare(cls, cfg: Any, out_dir: str | Path, workers: int | None = None,
                progress: bool = True) -> Path:
        """Check the split, decode and store every image; return the manifest path."""
        from intact.data.prepare_images import prepare_images

        tasks, split_files = cls.plan(cfg)
        # the split recorded in the manifest: the built-in types' named split; None for a type without one
        split = getattr(cfg, "split_name", None)
        return prepare_images(cfg, tasks, split_files, out_dir, workers=workers, progress=progress, split=split)
