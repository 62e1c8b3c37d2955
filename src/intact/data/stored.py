"""Prepared image benchmarks: per-task uint8 arrays opened as memory maps (the benchmark class that opens
them: :mod:`intact.data.image_benchmark`).

``prepare_data`` (see :mod:`intact.data.prepare_images`) stores every image once after the
deterministic part of the protocol's transform (Resize + CenterCrop) as ``(N, S, S, 3)`` uint8 in a
``.npy`` file. Training images of ImageNet-C keep S = 230 so the random 224 crop can follow on the
device; everything else is stored at the network's input size. Nothing is unpickled: ``np.load``
runs with ``allow_pickle=False``.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset



def center_offset(stored: int, size: int) -> int:
    """Top/left offset of a centre crop, as torchvision's CenterCrop computes it."""
    return int(round((stored - size) / 2.0))


def val_rows(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Sorted rows of a task's validation part: of each class's n train images, round(fraction * n), at most
    n - 1 (a class always keeps a training image), taken by a permutation seeded with ``seed``. Deterministic
    (numpy's PCG64 is portable), stratified, and drawn from the train list only: no test image is ever in it."""
    rng = np.random.default_rng(seed)
    taken = []
    for c in np.unique(labels[labels >= 0]):
        rows = np.flatnonzero(labels == c)
        k = min(int(round(fraction * len(rows))), len(rows) - 1)
        taken.append(rows[rng.permutation(len(rows))[:k]])
    return np.sort(np.concatenate(taken)) if taken else np.zeros(0, dtype=np.int64)


def task_val_seed(val_seed: int, task: str) -> int:
    """The seed of one task's validation draw: fixed per (val_seed, task name), wherever the task sits."""
    return zlib.crc32(f"{val_seed}:val:{task}".encode())


class StoredImages(Dataset):
    """One split of one task: ``x`` (N, S, S, 3) uint8 (a memory map) and labels, cropped to ``size``.

    ``augment`` marks a training set: the fast loader (:mod:`intact.data.loader`) then draws a random
    horizontal flip (and a random crop where S > size) per image on the device. Item access (the
    DataLoader path of code that does not use the fast loader) always gives the deterministic view:
    the centre crop, unflipped, as float CHW in [0, 1] - what evaluation and the hypercube pass see.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, size: int, augment: bool, task: int):
        keep = np.flatnonzero(y >= 0)  # label -1 marks an image skipped as unreadable
        self.x, self.y, self.size, self.augment, self.task = x, y, size, augment, task
        self.rows = keep if len(keep) < len(y) else None
        self.labels = torch.from_numpy(np.array(y[keep] if self.rows is not None else y, dtype=np.int64))

    @property
    def stored_size(self) -> int:
        return int(self.x.shape[1])

    def __len__(self) -> int:
        return len(self.labels)

    def row(self, index: np.ndarray) -> np.ndarray:
        """Rows of the stored array for dataset indices ``index``."""
        return index if self.rows is None else self.rows[index]

    def gather(self, index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 (B, S, S, 3) pixels and int64 labels of dataset indices ``index`` (no per-sample Python)."""
        index = np.asarray(index, dtype=np.int64)
        rows = self.row(index)
        # a sorted read is sequential on disk; the permutation back restores the batch order
        sort = np.argsort(rows, kind="stable")
        pixels = np.empty((len(rows), *self.x.shape[1:]), dtype=np.uint8)
        pixels[sort] = self.x[rows[sort]]
        return torch.from_numpy(pixels), self.labels[torch.from_numpy(index)]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        r = int(self.row(np.asarray([i]))[0])
        o = center_offset(self.stored_size, self.size)
        img = torch.from_numpy(np.array(self.x[r, o:o + self.size, o:o + self.size]))
        return img.permute(2, 0, 1).float().div(255), self.labels[i]
