"""Synthetic image trees in the real layouts of DomainNet, ImageNet-R and ImageNet-C (tiny JPEGs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

WNIDS = ["n01443537", "n01833805", "n02007558", "n02051845"]


def jpeg(path: Path, rng: np.random.Generator, label: int, size: tuple[int, int] | None = None) -> None:
    """A small JPEG whose mean colour depends on the label (so a model can learn something)."""
    w, h = size or (int(rng.integers(36, 60)), int(rng.integers(36, 60)))
    base = np.array([(label * 70) % 256, (label * 130 + 40) % 256, (label * 200 + 90) % 256], dtype=np.float64)
    img = np.clip(base + rng.normal(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path, quality=90)


def write_list(path: Path, entries: list[tuple[str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{p} {y}\n" for p, y in entries))


def imagenet_r(root: Path, lists: Path, domains: list[str], per_class: int = 3, seed: int = 0) -> None:
    """``<root>/<wnid>/<domain>_<n>.jpg`` and ``<lists>/{train,test}.txt`` (2/3 train, 1/3 test)."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label, wnid in enumerate(WNIDS):
        for d in domains:
            for n in range(per_class):
                rel = f"{wnid}/{d}_{n}.jpg"
                jpeg(root / rel, rng, label)
                (test if n % 3 == 2 else train).append((rel, label))
    write_list(lists / "train.txt", train)
    write_list(lists / "test.txt", test)


def imagenet_c(root: Path, lists: Path, corruptions: list[str], per_class: int = 3, seed: int = 1) -> None:
    """``<root>/<corruption>/5/<wnid>/ILSVRC2012_val_<n>.JPEG`` (square, as ImageNet-C ships) and lists."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in corruptions:
        for label, wnid in enumerate(WNIDS):
            for n in range(per_class):
                rel = f"{c}/5/{wnid}/ILSVRC2012_val_{label * 100 + n:08d}.JPEG"
                jpeg(root / rel, rng, label, size=(40, 40))
                (test if n % 3 == 2 else train).append((rel, label))
    write_list(lists / "train.txt", train)
    write_list(lists / "test.txt", test)


def domainnet(root: Path, domains: list[str], per_class: int = 3, seed: int = 2) -> None:
    """``<root>/<domain>/<class>/<domain>_<n>.jpg`` and the official ``<root>/<domain>_{train,test}.txt``."""
    rng = np.random.default_rng(seed)
    for d in domains:
        train, test = [], []
        for label, cls in enumerate(["aircraft_carrier", "apple", "bee", "zebra"]):
            for n in range(per_class):
                rel = f"{d}/{cls}/{d}_{label:03d}_{n:06d}.jpg"
                jpeg(root / rel, rng, label)
                (test if n % 3 == 2 else train).append((rel, label))
        write_list(root / f"{d}_train.txt", train)
        write_list(root / f"{d}_test.txt", test)
