"""DomainNet: 6 domains, 345 classes, the official ``<domain>_{train,test}.txt`` lists of the data root.

Layout: ``<root>/<domain>/<class>/<file>.jpg`` and ``<root>/<domain>_{train,test}.txt`` as the
dataset unpacks. ``split:`` may instead name a folder holding lists of the same names.
"""

from __future__ import annotations

from dataclasses import dataclass

from intact.data.declare import BenchmarkType
from intact.data.image_benchmark import ImageBenchmark
from intact.data.image_config import CHANNELS, DOMAINNET, ImageBenchmarkConfig, expand_path
from intact.data.split_lists import bucket, describe_file, find_list, read_list
from intact.settings import setting


@dataclass(frozen=True)
class DomainNetSettings(ImageBenchmarkConfig):
    """``benchmarks.<name>`` of type ``domainnet``."""

    root: str | None = setting(None, "holds <domain>/<class>/<file>.jpg and <domain>_{train,test}.txt; $VARS and ~ "
                               "expand", minLength=1)
    split: str | None = setting(None, "official (the root's <domain>_{train,test}.txt) or a folder of such lists; "
                                "$VARS expand", minLength=1)


class DomainNet(ImageBenchmark):
    """DomainNet in the paper's order real, quickdraw, painting, sketch, infograph, clipart."""

    @classmethod
    def plan(cls, cfg: DomainNetSettings) -> tuple[list, list[dict]]:
        from intact.data.prepare_images import TaskPlan  # numpy, PIL: only preparing needs them

        root = expand_path(cfg.root)
        folder = root if cfg.split_name == "official" else expand_path(cfg.split_name)
        tasks, files = [], []
        for domain in cfg.tasks:
            parts = {}
            for split in ("train", "test"):
                path = find_list(folder, f"{domain}_{split}")
                files.append({"task": domain, "split": split, **describe_file(path)})
                parts[split] = bucket(read_list(path), lambda rel, d=domain: d, [domain], root)[domain]
            size = cfg.image_size
            tasks.append(TaskPlan(domain, parts["train"], parts["test"], size, size, size))
        return tasks, files


BENCHMARK = BenchmarkType(
    "domainnet", DomainNetSettings, "intact.data.domainnet:DomainNet", "DomainNet from a local root",
    tasks=DOMAINNET, num_classes=345, required=("root",), splits=("official",), channels=CHANNELS)
