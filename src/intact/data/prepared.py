"""Prepared image benchmarks: per-task uint8 arrays opened as memory maps (the benchmark class that opens
them: :mod:`intact.data.image_benchmark`).

``prepare_data`` (see :mod:`intact.data.prepare_images`) writes every image once after the
deterministic part of the protocol's transform (Resize + CenterCrop) as ``(N, S, S, 3)`` uint8 in a
``.npy`` file. Training images of ImageNet-C keep S = 230 so the random 224 crop can follow on the
device; everything else is prepared at the network's input size. Nothing is unpickled: ``np.load``
runs with ``allow_pickle=False``.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from intact.data.image_config import val_count


def center_offset(side: int, size: int) -> int:
    """Top/left offset of a centre crop, as torchvision's CenterCrop computes it."""
    return int(round((side - size) / 2.0))


def val_rows(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Sorted rows of a task's validation part: of each class's n train images, round(fraction * n), at most
    n - 1 (a class always keeps a training image), taken by a permutation seeded with ``seed``. Deterministic
    (numpy's PCG64 is portable), stratified, and drawn from the train list only: no test image is ever in it."""
    rng = np.random.default_rng(seed)
    taken = []
    for c in np.unique(labels[labels >= 0]):
        rows = np.flatnonzero(labels == c)
        k = val_count(fraction, len(rows))
        taken.append(rows[rng.permutation(len(rows))[:k]])
    return np.sort(np.concatenate(taken)) if taken else np.zeros(0, dtype=np.int64)


def task_val_seed(val_seed: int, task: str) -> int:
    """The seed of one task's validation draw: fixed per (val_seed, task name), wherever the task sits."""
    return zlib.crc32(f"{val_seed}:val:{task}".encode())


class PreparedImages(Dataset):
    """One split of one task: ``x`` (N, S, S, 3) uint8 (a memory map) and labels, cropped to ``size``.

    ``augment`` marks a training set: the fast loader (:mod:`intact.data.loader`) then draws a random
    horizontal flip (and a random crop where S > size) per image on the device. Item access (the
    DataLoader path of code that does not use the fast loader) always gives the deterministic view:
    the centre crop, unflipped, as float CHW in [0, 1] - what evaluation and the hypercube pass see.

    A run may read the images otherwise (``optim.train_crop``, ``optim.test_resize``; docs/protocols.md
    section 8): ``random_resized`` replaces the training crop by RandomResizedCrop, ``test_resize`` = R makes
    the deterministic view Resize(R) + CenterCrop(size) of the original image, taken from the prepared one,
    which is Resize(``resize``) + CenterCrop(S) of it (the prepared task's ``resize`` side).
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, size: int, augment: bool, task: int, *,
                 resize: int | None = None, random_resized: bool = False, test_resize: int | None = None):
        keep = np.flatnonzero(y >= 0)  # label -1 marks an image skipped as unreadable
        self.x, self.y, self.size, self.augment, self.task = x, y, size, augment, task
        self.resize = resize or self.prepared_size
        self.random_resized, self.test_resize = random_resized, test_resize
        self.rows = keep if len(keep) < len(y) else None
        self.labels = torch.from_numpy(np.array(y[keep] if self.rows is not None else y, dtype=np.int64))

    @property
    def prepared_size(self) -> int:
        return int(self.x.shape[1])

    @property
    def as_prepared(self) -> bool:
        """Whether the run reads the images as prepared (what a feature cache holds)."""
        return not self.random_resized and self.test_resize is None

    def center_window(self) -> float | None:
        """The side, in prepared pixels, of the centre window that ``test_resize`` keeps (None: no window)."""
        if self.test_resize is None:
            return None
        side, least = self.size * self.resize / self.test_resize, self.size * self.resize / self.prepared_size
        if side > self.prepared_size:
            raise ValueError(f"optim.test_resize = {self.test_resize}: Resize({self.test_resize}) + "
                             f"CenterCrop({self.size}) needs a window of {side:.1f} px of images prepared at "
                             f"Resize({self.resize}) + CenterCrop({self.prepared_size}); "
                             f"use test_resize >= {least:.0f}")
        return side

    def __len__(self) -> int:
        return len(self.labels)

    def row(self, index: np.ndarray) -> np.ndarray:
        """Rows of the prepared array for dataset indices ``index``."""
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
        window = self.center_window()
        if window is not None:
            side = torch.full((1,), window, dtype=torch.float64)
            at = (self.prepared_size - side) / 2
            img = resample(torch.from_numpy(np.array(self.x[r:r + 1])), at, at, side, side,
                           torch.zeros(1, dtype=torch.bool), self.size, crop=False)
            return img[0], self.labels[i]
        o = center_offset(self.prepared_size, self.size)
        img = torch.from_numpy(np.array(self.x[r, o:o + self.size, o:o + self.size]))
        return img.permute(2, 0, 1).float().div(255), self.labels[i]


#: torchvision's RandomResizedCrop defaults (the official scripts' ``RandomResizedCrop(224)``): the crop's area
#: as a fraction of the image's, its aspect ratio, and the draws before it falls back to the whole image
RRC_SCALE, RRC_RATIO, RRC_ATTEMPTS = (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0), 10


def resized_boxes(u: torch.Tensor, side: int) -> tuple[torch.Tensor, ...]:
    """(top, left, height, width) of RandomResizedCrop in a ``side`` x ``side`` image, as torchvision's
    ``RandomResizedCrop.get_params`` draws them, from ``u`` (B, attempts, 4) uniforms in [0, 1): per attempt
    the area fraction, the log aspect ratio, and the top and left placement; the first attempt that fits is
    taken, the whole image where none does (its fallback for a square image)."""
    lo, hi = math.log(RRC_RATIO[0]), math.log(RRC_RATIO[1])
    area = side * side * (RRC_SCALE[0] + (RRC_SCALE[1] - RRC_SCALE[0]) * u[..., 0])
    ratio = torch.exp(lo + (hi - lo) * u[..., 1])
    w, h = torch.round(torch.sqrt(area * ratio)), torch.round(torch.sqrt(area / ratio))
    fits = (w > 0) & (w <= side) & (h > 0) & (h <= side)
    first = fits.double().argmax(1, keepdim=True)   # the first attempt that fits (0 where none does)
    pick = lambda t: t.gather(1, first)[:, 0]        # noqa: E731
    found = fits.any(1)
    h, w = torch.where(found, pick(h), float(side)), torch.where(found, pick(w), float(side))
    top = torch.where(found, torch.floor(pick(u[..., 2]) * (side - h + 1)), 0.0)
    left = torch.where(found, torch.floor(pick(u[..., 3]) * (side - w + 1)), 0.0)
    return top, left, h, w


def resample(pixels: torch.Tensor, top: torch.Tensor, left: torch.Tensor, height: torch.Tensor, width: torch.Tensor,
             flip: torch.Tensor, size: int, crop: bool = True) -> torch.Tensor:
    """(B, S, S, 3) uint8 -> (B, 3, size, size) float in [0, 1]: each image's box (top, left, height, width in
    prepared pixels, fractional allowed) resized to ``size`` bilinearly (pixel centres, as a Resize without
    antialiasing), then flipped where ``flip``; one batched ``grid_sample`` on the pixels' device. ``crop``:
    the box is cut out first (crop, then resize, as RandomResizedCrop: its edge pixels repeat); else the
    samples near its edge also read the pixels beyond it (a window of an image resized as a whole)."""
    dev, s = pixels.device, pixels.shape[1]
    x = pixels.permute(0, 3, 1, 2).float().div_(255)
    top, left = top.to(dev, torch.float32), left.to(dev, torch.float32)
    width, height = width.to(dev, torch.float32), height.to(dev, torch.float32)
    theta = torch.zeros((len(x), 2, 3), device=dev)
    theta[:, 0, 0] = torch.where(flip.to(dev), -width / s, width / s)
    theta[:, 0, 2] = (2 * left + width) / s - 1
    theta[:, 1, 1] = height / s
    theta[:, 1, 2] = (2 * top + height) / s - 1
    grid = F.affine_grid(theta, [len(x), 3, size, size], align_corners=False)
    if crop:   # no sample beyond the box's first and last pixel centres (normalised coordinates)
        lo = torch.stack([(2 * left + 1) / s - 1, (2 * top + 1) / s - 1], 1)[:, None, None, :]
        hi = torch.stack([(2 * (left + width) - 1) / s - 1, (2 * (top + height) - 1) / s - 1], 1)[:, None, None, :]
        grid = torch.maximum(torch.minimum(grid, hi), lo)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
