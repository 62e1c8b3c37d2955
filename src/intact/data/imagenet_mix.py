"""ImageNet-Mix: 30 tasks alternating ImageNet-C and ImageNet-R (C0, R0, C1, R1, ..., C14, R14).

C tasks are ImageNet-C's (``root_c``, the corruption lists, Resize(230) + random 224 crop); R tasks
come from the KA-style ImageNet-R lists (``root_r``); both share the KA label map (200 classes).
Task names are ``c_<corruption>`` / ``r_<domain>``. ``split: ka`` (default) uses the shipped lists;
a folder path holds a user's ``c_train.txt``, ``c_test.txt``, ``r_train.txt``, ``r_test.txt``.
"""

from __future__ import annotations

from intact.data.image_config import ImageBenchmarkConfig, expand_path
from intact.data.imagenet_c import c_lists, c_task
from intact.data.imagenet_r import r_lists
from intact.data.prepare_images import TaskPlan
from intact.data.stored import ImageBenchmark


class ImageNetMix(ImageBenchmark):
    """ImageNet-Mix in the paper's alternating order."""

    @classmethod
    def plan(cls, cfg: ImageBenchmarkConfig) -> tuple[list[TaskPlan], list[dict]]:
        corruptions = tuple(t[2:] for t in cfg.tasks if t.startswith("c_"))
        domains = tuple(t[2:] for t in cfg.tasks if t.startswith("r_"))
        c, c_files = c_lists(cfg.split_name, expand_path(cfg.root_c), corruptions, user_stem="c_")
        r, r_files = r_lists(cfg.split_name, expand_path(cfg.root_r), domains, user_stem="r_")
        size = cfg.image_size
        tasks = [c_task(t, c[t[2:]], size) if t.startswith("c_")
                 else TaskPlan(t, r[t[2:]]["train"], r[t[2:]]["test"], size, size, size) for t in cfg.tasks]
        files = [{"half": "c", **f} for f in c_files] + [{"half": "r", **f} for f in r_files]
        return tasks, files
