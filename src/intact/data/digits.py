"""The embedded benchmark: scikit-learn's bundled digits under a sequence of image domains.

No download: ``load_digits`` ships with scikit-learn. The 8x8 images (0-16) are scaled to [0, 1] and
bilinearly upsampled. A stratified ``pretrain_fraction`` of the images is kept clean for pretraining
the backbone; the rest is split once into train / test, and every task applies its domain to the
*same* images, so no test image is ever trained on under any domain. A stratified ``val_fraction`` of
the training images is the validation part used for hyperparameter search. The class that opens a prepared
benchmark for a job: :class:`intact.data.impl.digits.DigitsBenchmark`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from intact.data.declare import BenchmarkSettings, BenchmarkType
from intact.settings import plain, setting
from intact.settings.experiments import DIGIT_COUNTS, stratified_sizes

if TYPE_CHECKING:
    import numpy as np
    import torch

DATA_FILE = "data.safetensors"
#: every domain of :mod:`intact.data.domains` (a test keeps the two equal; that module imports torch)
DIGIT_DOMAINS = ("blur", "contrast", "pixelate", "thick", "shear", "stripes", "noise", "fog", "occlude", "edges",
                 "invert", "rotate", "speckle", "elastic")


@dataclass(frozen=True)
class BenchmarkConfig(BenchmarkSettings):
    """``benchmarks.<name>`` of type ``digits``: the domain sequence and the splits."""

    domains: tuple[str, ...] = setting((), "the task sequence, one image transformation per task (default: every "
                                       "domain)", minItems=2)
    image_size: int = setting(32, "image side (the 8x8 digits bilinearly upsampled)", minimum=1)
    pretrain_fraction: float = setting(0.4, "clean images that pretrain the backbone", exclusiveMinimum=0,
                                       exclusiveMaximum=1)
    test_fraction: float = setting(0.4, "of the remaining images: the test split (train: the rest)",
                                   exclusiveMinimum=0, exclusiveMaximum=1)
    val_fraction: float = setting(0.2, "of the training images: the validation part (eval_split: val)",
                                  exclusiveMinimum=0, exclusiveMaximum=1)
    # scikit-learn's random_state takes 0 to 2^32 - 1; the splits use split_seed, + 1 and + 2
    split_seed: int = setting(0, "seed of the stratified splits and of each domain's randomness", minimum=0,
                              maximum=2**32 - 3)

    def train_images(self, eval_split: str) -> int:
        """Every task trains on the same images: the training split, less its validation part under ``val``."""
        (_, _, train), (_, _, rest) = split_sizes(self)[1:]
        return rest if eval_split == "val" else train


#: scikit-learn's digits: 1,797 images, 174-183 of each of its 10 classes
DIGITS, CLASSES = sum(DIGIT_COUNTS), len(DIGIT_COUNTS)
#: the stratified splits :func:`prepare` makes, in order: each takes its fraction of what the previous one kept
#: (pretrain | continual; test | train, of the continual images; val | the rest, of the training images)
SPLITS = ("pretrain_fraction", "test_fraction", "val_fraction")


def split_sizes(cfg: BenchmarkConfig) -> list[tuple[str, int, int]]:
    """(fraction key, images taken, images kept) of each split of :data:`SPLITS`, sized as scikit-learn sizes them
    (:func:`intact.settings.experiments.stratified_sizes`), without reading the images."""
    out, n = [], DIGITS
    for key in SPLITS:
        taken, n = stratified_sizes(getattr(cfg, key), n)
        out.append((key, taken, n))
    return out


def check(cfg: BenchmarkConfig) -> Iterator[tuple[str, str]]:
    """Every split leaves each side enough images to split by class (scikit-learn refused it in the prepare job)."""
    for key, taken, kept in split_sizes(cfg):
        if min(taken, kept) < CLASSES:
            yield key, (f"splits {taken + kept} images into {taken} taken and {kept} kept: a stratified split needs "
                        f"at least {CLASSES} on each side, one of each class")
            return


def _stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (rest, taken) with ``fraction`` of each class taken, deterministically."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(labels))
    rest, taken = train_test_split(idx, test_size=fraction, stratify=labels, random_state=seed)
    return np.sort(rest), np.sort(taken)


def _domain_seed(split_seed: int, domain: str) -> int:
    # A fixed per-domain seed: the same domain gets the same randomness wherever it sits in the order.
    return zlib.crc32(f"{split_seed}:{domain}".encode())


def pretrain_indices(pretrain_fraction: float, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(continual, pretrain)``: the indices into scikit-learn's digits that a ``digits`` entry with these settings
    keeps for its tasks, and those its clean pretraining split holds (a backbone pretrained on it has seen them).
    Another benchmark of the same images leaves the second out (docs/adding-a-benchmark.md)."""
    from sklearn.datasets import load_digits

    return _stratified_split(load_digits().target, pretrain_fraction, split_seed)


def load_digit_images(image_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits as (N, 1, S, S) floats in [0, 1] and int64 labels."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.from_numpy(d.images.astype(np.float32) / 16.0).unsqueeze(1)
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False).clamp_(0, 1)
    return x.contiguous(), torch.from_numpy(d.target.astype(np.int64))


def prepare(cfg: BenchmarkConfig, out_dir: str | Path) -> Path:
    """Build the benchmark under ``out_dir``; return the manifest path (written last, atomically)."""
    import torch

    from intact.data.domains import apply_domain
    from intact.hashing import sha256_file
    from intact.io import save_tensors, write_json

    out_dir = Path(out_dir)
    x, y = load_digit_images(cfg.image_size)
    labels = y.numpy()
    continual, pretrain = pretrain_indices(cfg.pretrain_fraction, cfg.split_seed)
    train_rel, test_rel = _stratified_split(labels[continual], cfg.test_fraction, cfg.split_seed + 1)
    train, test = continual[train_rel], continual[test_rel]
    _, val_rel = _stratified_split(labels[train], cfg.val_fraction, cfg.split_seed + 2)
    val_mask = torch.zeros(len(train), dtype=torch.bool)
    val_mask[torch.from_numpy(val_rel)] = True

    tensors = {
        "pretrain_x": x[pretrain], "pretrain_y": y[pretrain],
        "train_index": torch.from_numpy(train), "test_index": torch.from_numpy(test),
        "train_y": y[train], "test_y": y[test], "val_mask": val_mask,
        "clean_test_x": x[test],
    }
    for domain in cfg.tasks:   # `domains`, else every declared domain
        seed = _domain_seed(cfg.split_seed, domain)
        tensors[f"{domain}/train_x"] = apply_domain(domain, x[train], seed)
        tensors[f"{domain}/test_x"] = apply_domain(domain, x[test], seed + 1)
    data_path = out_dir / DATA_FILE
    save_tensors(data_path, tensors)

    manifest = {
        "benchmark": cfg.name,
        "type": cfg.type,
        "config": plain(cfg),
        "num_classes": cfg.num_classes,
        "class_names": [str(c) for c in range(cfg.num_classes)],
        "image_shape": [1, cfg.image_size, cfg.image_size],
        "tasks": [
            {"name": d, "train": len(train), "val": int(val_mask.sum()), "test": len(test)} for d in cfg.tasks
        ],
        "pretrain_images": len(pretrain),
        "files": {DATA_FILE: sha256_file(data_path)},
    }
    manifest_path = out_dir / "manifest.json"
    write_json(manifest_path, manifest)
    return manifest_path


BENCHMARK = BenchmarkType("digits", BenchmarkConfig, "intact.data.impl.digits:DigitsBenchmark",
                          "the embedded benchmark (scikit-learn digits under deterministic image domains)",
                          tasks=DIGIT_DOMAINS, num_classes=CLASSES, channels=1, pretrains=True, parallel_prepare=False,
                          check=check)
