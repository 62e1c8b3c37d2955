"""The embedded digits benchmark opened for a job (imports torch); declared, and prepared, in
:mod:`intact.data.digits`."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import Dataset, TensorDataset

from intact.data.base import Benchmark, Preview
from intact.data.digits import DATA_FILE, prepare
from intact.io import load_tensors


def _task_split(data: TensorDataset, task: int) -> TensorDataset:
    """Mark a task's full train / test split (what a query cache covers; see intact.cache)."""
    data.task = task
    return data


class DigitsBenchmark(Benchmark):
    """Opens a prepared digits benchmark (see :func:`intact.data.digits.prepare`)."""

    prepare = staticmethod(prepare)

    def __init__(self, manifest_path: str | Path):
        super().__init__(manifest_path)
        self._t = load_tensors(self.root / DATA_FILE)

    def _x(self, task: int, split: str) -> torch.Tensor:
        return self._t[f"{self.task_names[task]}/{split}_x"]

    def train_set(self, task: int, eval_split: str = "test") -> Dataset:
        x, y = self._x(task, "train"), self._t["train_y"]
        if eval_split == "val":
            keep = ~self._t["val_mask"]
            return TensorDataset(x[keep], y[keep])
        return _task_split(TensorDataset(x, y), task)

    def eval_set(self, task: int, eval_split: str = "test") -> Dataset:
        if eval_split == "val":
            m = self._t["val_mask"]
            return TensorDataset(self._x(task, "train")[m], self._t["train_y"][m])
        return _task_split(TensorDataset(self._x(task, "test"), self._t["test_y"]), task)

    def pretrain_set(self) -> Dataset:
        """Clean images reserved for pretraining the backbone."""
        return TensorDataset(self._t["pretrain_x"], self._t["pretrain_y"])

    def clean_test_set(self) -> Dataset:
        """The continual test images without any domain (to report the backbone's clean accuracy)."""
        return TensorDataset(self._t["clean_test_x"], self._t["test_y"])

    def preview(self, n: int = 10) -> Preview:
        """One test image per class (up to ``n``): clean, then under every domain."""
        y = self._t["test_y"]
        idx = torch.stack([torch.nonzero(y == c)[0, 0] for c in range(min(n, self.num_classes))])
        rows = {"clean": self._t["clean_test_x"][idx]}
        rows.update({d: self._t[f"{d}/test_x"][idx] for d in self.task_names})
        labels = [int(c) for c in y[idx]]
        return Preview(title=f"{self.name}: one test image per class, clean and under each domain",
                       rows={name: x.permute(0, 2, 3, 1).numpy() for name, x in rows.items()},
                       labels={name: labels for name in rows})
