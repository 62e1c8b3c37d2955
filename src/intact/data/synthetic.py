"""Synthetic image trees in the real layouts of DomainNet, ImageNet-R, ImageNet-C and ImageNet-Mix, with split lists
in the real formats: what a rehearsal prepares (intact.rehearsal, workflow rule ``rehearsal_data``) and the tests
read, so that the real ``prepare_images``, loaders and split checks run on them.

Each image is a small JPEG whose mean colour depends on its label (a model can learn something), every third image
of a class and task a test image. The writers import numpy and PIL (not torch); the same arguments give the same
files.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Sequence

if TYPE_CHECKING:
    import numpy as np

#: class folders: the first four are real ImageNet wnids (the tests' trees), then made-up ones
WNIDS = ["n01443537", "n01833805", "n02007558", "n02051845"]
DOMAINNET_CLASSES = ["aircraft_carrier", "apple", "bee", "zebra"]


def _names(known: Sequence[str], classes: int, made_up: str) -> list[str]:
    return [*known[:classes], *(made_up.format(i) for i in range(len(known), classes))]


def _rng(seed: int) -> np.random.Generator:
    import numpy as np

    return np.random.default_rng(seed)


def jpeg(path: Path, rng: np.random.Generator, label: int, size: tuple[int, int] | None = None) -> None:
    """A small JPEG whose mean colour depends on the label (so a model can learn something)."""
    import numpy as np
    from PIL import Image

    w, h = size or (int(rng.integers(36, 60)), int(rng.integers(36, 60)))
    base = np.array([(label * 70) % 256, (label * 130 + 40) % 256, (label * 200 + 90) % 256], dtype=np.float64)
    img = np.clip(base + rng.normal(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path, quality=90)


def is_test_image(n: int) -> bool:
    """Whether the ``n``-th image of a class in a task is a test image: every third one; the rest train."""
    return n % 3 == 2


def write_list(path: Path, entries: list[tuple[str, int]]) -> None:
    """A split list: ``relative/path label`` per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{p} {y}\n" for p, y in entries))


def imagenet_r(root: Path, lists: Path, domains: Sequence[str], per_class: int = 3, seed: int = 0,
               classes: int = 4) -> None:
    """``<root>/<wnid>/<domain>_<n>.jpg`` and ``<lists>/{train,test}.txt``."""
    rng = _rng(seed)
    train, test = [], []
    for label, wnid in enumerate(_names(WNIDS, classes, "n{:08d}")):
        for d in domains:
            for n in range(per_class):
                rel = f"{wnid}/{d}_{n}.jpg"
                jpeg(root / rel, rng, label)
                (test if is_test_image(n) else train).append((rel, label))
    write_list(lists / "train.txt", train)
    write_list(lists / "test.txt", test)


def imagenet_c(root: Path, lists: Path, corruptions: Sequence[str], per_class: int = 3, seed: int = 1,
               classes: int = 4) -> None:
    """``<root>/<corruption>/5/<wnid>/ILSVRC2012_val_<n>.JPEG`` (square, as ImageNet-C ships) and the lists."""
    rng = _rng(seed)
    train, test = [], []
    for c in corruptions:
        for label, wnid in enumerate(_names(WNIDS, classes, "n{:08d}")):
            for n in range(per_class):
                rel = f"{c}/5/{wnid}/ILSVRC2012_val_{label * 100 + n:08d}.JPEG"
                jpeg(root / rel, rng, label, size=(40, 40))
                (test if is_test_image(n) else train).append((rel, label))
    write_list(lists / "train.txt", train)
    write_list(lists / "test.txt", test)


def domainnet(root: Path, domains: Sequence[str], per_class: int = 3, seed: int = 2, classes: int = 4) -> None:
    """``<root>/<domain>/<class>/<domain>_<n>.jpg`` and the official ``<root>/<domain>_{train,test}.txt``."""
    rng = _rng(seed)
    for d in domains:
        train, test = [], []
        for label, cls in enumerate(_names(DOMAINNET_CLASSES, classes, "class_{:03d}")):
            for n in range(per_class):
                rel = f"{d}/{cls}/{d}_{label:03d}_{n:06d}.jpg"
                jpeg(root / rel, rng, label)
                (test if is_test_image(n) else train).append((rel, label))
        write_list(root / f"{d}_train.txt", train)
        write_list(root / f"{d}_test.txt", test)


def imagenet_mix(root_r: Path, root_c: Path, lists: Path, tasks: Sequence[str], per_class: int = 3, seed: int = 0,
                 classes: int = 4) -> None:
    """ImageNet-R and -C trees for the ``r_<domain>`` / ``c_<corruption>`` tasks, and the lists
    ``<lists>/{r,c}_{train,test}.txt``."""
    imagenet_r(root_r, lists / "r", [t[2:] for t in tasks if t.startswith("r_")], per_class, seed, classes)
    imagenet_c(root_c, lists / "c", [t[2:] for t in tasks if t.startswith("c_")], per_class, seed + 1, classes)
    for half in ("r", "c"):
        for part in ("train", "test"):
            (lists / f"{half}_{part}.txt").write_text((lists / half / f"{part}.txt").read_text())


#: per type, the benchmark keys a synthetic tree sets: a folder under the tree's own (or, for DomainNet's lists in
#: its root, the split's name)
TREE_KEYS: dict[str, dict[str, str]] = {
    "imagenet_r": {"root": "root", "split": "lists"},
    "imagenet_c": {"root": "root", "split": "lists"},
    "domainnet": {"root": "root"},
    "imagenet_mix": {"root_r": "root_r", "root_c": "root_c", "split": "lists"},
}


def tree_keys(kind: str, out: str | Path) -> dict[str, str]:
    """The benchmark keys (``root`` / ``root_r`` / ``root_c``, ``split`` where the lists live outside the root) that
    point at the synthetic tree of type ``kind`` under ``out`` (:func:`write_tree`)."""
    if kind not in TREE_KEYS:
        raise ValueError(f"no synthetic layout for benchmark type {kind!r}; these have one: {', '.join(TREE_KEYS)}")
    return {key: str(Path(out) / folder) for key, folder in TREE_KEYS[kind].items()}


def write_tree(kind: str, out: str | Path, tasks: Sequence[str], per_class: int, classes: int, seed: int) -> None:
    """The synthetic tree of benchmark type ``kind`` for ``tasks`` under ``out`` (where :func:`tree_keys` point)."""
    keys = {k: Path(v) for k, v in tree_keys(kind, out).items()}
    if kind == "imagenet_r":
        imagenet_r(keys["root"], keys["split"], tasks, per_class, seed, classes)
    elif kind == "imagenet_c":
        imagenet_c(keys["root"], keys["split"], tasks, per_class, seed, classes)
    elif kind == "domainnet":
        domainnet(keys["root"], tasks, per_class, seed, classes)
    else:
        imagenet_mix(keys["root_r"], keys["root_c"], keys["split"], tasks, per_class, seed, classes)
