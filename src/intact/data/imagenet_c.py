"""ImageNet-C: 15 corruptions at severity 5 over the 200 ImageNet-R classes; task = the corruption.

Layout: ``<root>/<corruption>/5/<wnid>/ILSVRC2012_val_<n>.JPEG``. ``split: ka`` (default) is the
KA-Prompt / C-Prompt lists (a 70/30 split per corruption); a folder path holds a user's
``train.txt`` / ``test.txt``. The protocol resizes to 230: training images are prepared at 230 for
the random 224 crop on the device, test images as Resize(230) + CenterCrop(224). Note: in the
shipped lists every corruption's test images are training images of other corruptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from intact.data.declare import BenchmarkType
from intact.data.image_benchmark import ImageBenchmark
from intact.data.image_config import CHANNELS, IMAGENET_C, ImageBenchmarkConfig, expand_path
from intact.data.imagenet_r import list_file
from intact.data.split_lists import SplitList, bucket, describe_file, read_list
from intact.settings import setting


def corruption_of(rel: str) -> str:
    """``fog/5/n02206856/ILSVRC2012_val_00015727.JPEG`` -> ``fog``."""
    return rel.split("/", 1)[0]


def c_lists(split: str, root: str, corruptions: tuple[str, ...],
            user_stem: str = "") -> tuple[dict[str, dict[str, SplitList]], list[dict]]:
    """ImageNet-C lists bucketed by corruption and the files read."""
    out: dict[str, dict[str, SplitList]] = {c: {} for c in corruptions}
    files = []
    for part in ("train", "test"):
        path = list_file(split, part, {"ka": "imagenet-c_{part}.txt.xz"}, user_stem)
        files.append({"split": part, **describe_file(path)})
        for c, s in bucket(read_list(path), corruption_of, corruptions, root).items():
            out[c][part] = s
    return out, files


def c_resize(image_size: int) -> int:
    """The protocol's Resize(230) at 224 px, scaled with ``image_size``."""
    return round(image_size * 230 / 224)


def c_task(name: str, parts: dict[str, SplitList], image_size: int) -> Any:
    """Train prepared at the resize side (random crop later), test centre-cropped to ``image_size``: a TaskPlan."""
    from intact.data.prepare_images import TaskPlan  # numpy, PIL: only preparing needs them

    side = c_resize(image_size)
    return TaskPlan(name, parts["train"], parts["test"], resize=side, train_crop=side, test_crop=image_size)


@dataclass(frozen=True)
class ImageNetCSettings(ImageBenchmarkConfig):
    """``benchmarks.<name>`` of type ``imagenet_c``."""

    root: str | None = setting(None, "holds <corruption>/5/<wnid>/*.JPEG; $VARS and ~ expand", minLength=1)
    split: str | None = setting(None, "ka (KA-Prompt's, default) or a folder with train.txt / test.txt", minLength=1)


class ImageNetC(ImageBenchmark):
    """ImageNet-C in the paper's order defocus_blur, glass_blur, ..., snow."""

    @classmethod
    def plan(cls, cfg: ImageNetCSettings) -> tuple[list, list[dict]]:
        lists, files = c_lists(cfg.split_name, expand_path(cfg.root), cfg.tasks)
        return [c_task(c, lists[c], cfg.image_size) for c in cfg.tasks], files


BENCHMARK = BenchmarkType(
    "imagenet_c", ImageNetCSettings, "intact.data.imagenet_c:ImageNetC", "ImageNet-C (severity 5) from a local root",
    tasks=IMAGENET_C, num_classes=200, required=("root",), splits=("ka",), channels=CHANNELS)
