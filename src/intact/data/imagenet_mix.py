"""ImageNet-Mix: 30 tasks alternating ImageNet-C and ImageNet-R (C0, R0, C1, R1, ..., C14, R14).

C tasks are ImageNet-C's images (``root_c``, the corruption lists); R tasks come from the KA-style ImageNet-R
lists (``root_r``); both share the KA label map (200 classes). All 30 tasks get the authors' transform (their
``ImageNet_CR`` dataset): Resize(224) + CenterCrop(224) + flip; ``c_transform: imagenet_c`` gives the C tasks
ImageNet-C's own Resize(230) + random 224 crop instead (see ``docs/protocols.md``).
Task names are ``c_<corruption>`` / ``r_<domain>``. ``split: ka`` (default) uses the shipped lists;
a folder path holds a user's ``c_train.txt``, ``c_test.txt``, ``r_train.txt``, ``r_test.txt``.
"""

from __future__ import annotations

from dataclasses import dataclass

from intact.data.declare import BenchmarkType
from intact.data.image_benchmark import ImageBenchmark
from intact.data.image_config import CHANNELS, C_TRANSFORMS, IMAGENET_MIX, ImageBenchmarkConfig, expand_path
from intact.data.imagenet_c import c_lists, c_task
from intact.data.imagenet_r import r_lists
from intact.settings import setting


@dataclass(frozen=True)
class ImageNetMixSettings(ImageBenchmarkConfig):
    """``benchmarks.<name>`` of type ``imagenet_mix``: two roots, and how its C tasks are transformed."""

    root_r: str | None = setting(None, "the ImageNet-R root", minLength=1)
    root_c: str | None = setting(None, "the ImageNet-C root", minLength=1)
    split: str | None = setting(None, "ka (default) or a folder with {c,r}_{train,test}.txt", minLength=1)
    c_transform: str = setting("authors", "C tasks: authors (Resize 224 + CenterCrop 224 + flip, their ImageNet_CR) "
                               "or imagenet_c (Resize 230 + random 224 crop)", enum=list(C_TRANSFORMS))


class ImageNetMix(ImageBenchmark):
    """ImageNet-Mix in the paper's alternating order."""

    @classmethod
    def plan(cls, cfg: ImageNetMixSettings) -> tuple[list, list[dict]]:
        from intact.data.prepare_images import TaskPlan  # numpy, PIL: only preparing needs them

        corruptions = tuple(t[2:] for t in cfg.tasks if t.startswith("c_"))
        domains = tuple(t[2:] for t in cfg.tasks if t.startswith("r_"))
        c, c_files = c_lists(cfg.split_name, expand_path(cfg.root_c), corruptions, user_stem="c_")
        r, r_files = r_lists(cfg.split_name, expand_path(cfg.root_r), domains, user_stem="r_")
        size = cfg.image_size
        # the authors' transform (default) treats a C task as an R task; ``c_transform: imagenet_c`` keeps ImageNet-C's
        parts = {t: c[t[2:]] if t.startswith("c_") else r[t[2:]] for t in cfg.tasks}
        tasks = [c_task(t, parts[t], size) if (t.startswith("c_") and cfg.c_transform == "imagenet_c")
                 else TaskPlan(t, parts[t]["train"], parts[t]["test"], size, size, size) for t in cfg.tasks]
        files = [{"half": "c", **f} for f in c_files] + [{"half": "r", **f} for f in r_files]
        return tasks, files


BENCHMARK = BenchmarkType(
    "imagenet_mix", ImageNetMixSettings, "intact.data.imagenet_mix:ImageNetMix",
    "ImageNet-Mix: ImageNet-C and -R tasks alternating",
    tasks=IMAGENET_MIX, num_classes=200, required=("root_r", "root_c"), splits=("ka",), channels=CHANNELS)
