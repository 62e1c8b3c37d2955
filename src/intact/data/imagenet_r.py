"""ImageNet-R as a 15-domain sequence (200 classes); the task of an image is its file-name prefix.

Layout: ``<root>/<wnid>/<domain>_<n>.jpg``. ``split: coda`` (default) is the InTAct paper's
CODA-Prompt 80/20 split, ``split: ka`` the KA-Prompt / C-Prompt lists (another label map and test
set); a folder path holds a user's ``train.txt`` / ``test.txt`` in the same format. The 5-task
variant sets ``domains`` to the first five.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from intact.data.declare import BenchmarkType
from intact.data.image_benchmark import ImageBenchmark
from intact.data.image_config import CHANNELS, IMAGENET_R, ImageBenchmarkConfig, expand_path
from intact.data.split_lists import SplitList, bucket, describe_file, find_list, read_list, shipped_split
from intact.settings import setting


def domain_of(rel: str) -> str:
    """``n01443537/art_12.jpg`` -> ``art``."""
    return os.path.basename(rel).split("_", 1)[0]


def list_file(split: str, part: str, shipped: dict[str, str], user_stem: str = "") -> Path:
    """The list of ``part`` (train/test): a shipped file for a named split, else ``<folder>/<stem>.txt``."""
    if split in shipped:
        return shipped_split(shipped[split].format(part=part))
    return find_list(expand_path(split), f"{user_stem}{part}")


def r_lists(split: str, root: str, domains: tuple[str, ...],
            user_stem: str = "") -> tuple[dict[str, dict[str, SplitList]], list[dict]]:
    """ImageNet-R lists bucketed by domain: {domain: {"train": ..., "test": ...}} and the files read."""
    shipped = {"coda": "imagenet-r_coda_{part}.txt.xz", "ka": "imagenet-r_ka_{part}.txt.xz"}
    out: dict[str, dict[str, SplitList]] = {d: {} for d in domains}
    files = []
    for part in ("train", "test"):
        path = list_file(split, part, shipped, user_stem)
        files.append({"split": part, **describe_file(path)})
        for d, s in bucket(read_list(path), domain_of, domains, root).items():
            out[d][part] = s
    return out, files


@dataclass(frozen=True)
class ImageNetRSettings(ImageBenchmarkConfig):
    """``benchmarks.<name>`` of type ``imagenet_r``."""

    root: str | None = setting(None, "holds <wnid>/<domain>_<n>.jpg; $VARS and ~ expand", minLength=1)
    split: str | None = setting(None, "coda (the InTAct paper's, default), ka (KA-Prompt's) or a folder with "
                                "train.txt / test.txt", minLength=1)


class ImageNetR(ImageBenchmark):
    """ImageNet-R in the paper's order art, cartoon, ..., videogame."""

    @classmethod
    def plan(cls, cfg: ImageNetRSettings) -> tuple[list, list[dict]]:
        from intact.data.prepare_images import TaskPlan  # numpy, PIL: only preparing needs them

        lists, files = r_lists(cfg.split_name, expand_path(cfg.root), cfg.tasks)
        size = cfg.image_size
        return [TaskPlan(d, lists[d]["train"], lists[d]["test"], size, size, size) for d in cfg.tasks], files


BENCHMARK = BenchmarkType(
    "imagenet_r", ImageNetRSettings, "intact.data.imagenet_r:ImageNetR", "ImageNet-R from a local root",
    tasks=IMAGENET_R, num_classes=200, required=("root",), splits=("coda", "ka"), channels=CHANNELS)
