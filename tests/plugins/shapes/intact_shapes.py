"""shapes: a domain-incremental benchmark read from an image-folder tree ``<root>/<domain>/<class>/<image>``.

The image benchmark of docs/adding-a-benchmark.md, a plugin of its own: tests/test_adding_a_benchmark.py installs
this folder (with its pyproject.toml) and runs shapes.yaml through Snakemake."""

from __future__ import annotations

import os
from dataclasses import dataclass
from collections.abc import Iterator

from intact.data.declare import BenchmarkSettings, BenchmarkType
from intact.data.image_benchmark import ImageBenchmark
from intact.paths import expand_path, missing_path
from intact.settings import setting

DOMAINS = ("photo", "sketch", "cartoon")      # the tasks, in their default order
CLASSES = ("circle", "square", "triangle")    # a class's label is its position here


# 1. The settings: name, type and backbone (BenchmarkSettings), then this type's keys with defaults and bounds.
@dataclass(frozen=True)
class ShapesSettings(BenchmarkSettings):
    root: str = setting("", "holds <domain>/<class>/<image>; $VARS and ~ expand", minLength=1)
    domains: tuple[str, ...] = setting((), "the task sequence (default: photo, sketch, cartoon)", minItems=1,
                                       uniqueItems=True)
    image_size: int = setting(32, "network input side", minimum=8)
    test_every: int = setting(3, "every n-th image of a class in a domain (by file name) is a test image", minimum=2)
    skip_unreadable: bool = setting(False, "skip (and list in the manifest) images that cannot be decoded")

    def missing_inputs(self) -> list[str]:
        # checked before a real run starts (a dry run only lists it)
        if os.path.isdir(expand_path(self.root)):
            return []
        return [f"key 'benchmarks.{self.name}.root': " + missing_path("data root", self.root)]


# 2. Its own consistency checks, run at config validation (no torch): (key, problem) pairs.
def check(s: ShapesSettings) -> Iterator[tuple[str, str]]:
    if s.image_size % 8:
        yield "image_size", "must be a multiple of 8 (the patch side of the small ViTs)"


# 3. The implementation. ImageBenchmark decodes every image once (in parallel, resumable), stores it and opens
#    it for the jobs; a type says which files each task trains and tests on. Importing it imports no torch.
class Shapes(ImageBenchmark):
    @classmethod
    def plan(cls, cfg: ShapesSettings) -> tuple[list, list[dict]]:
        from intact.data.prepare_images import TaskPlan
        from intact.data.split_lists import SplitList

        root, size, tasks = expand_path(cfg.root), cfg.image_size, []
        for domain in cfg.tasks:
            parts = {"train": SplitList(root), "test": SplitList(root)}
            for label, name in enumerate(CLASSES):
                for i, file in enumerate(sorted(os.listdir(os.path.join(root, domain, name)))):
                    part = parts["test" if i % cfg.test_every == cfg.test_every - 1 else "train"]
                    part.paths.append(f"{domain}/{name}/{file}")
                    part.labels.append(label)
            tasks.append(TaskPlan(domain, parts["train"], parts["test"], resize=size, train_crop=size, test_crop=size))
        return tasks, []  # (the list files read: none)


# 4. The declaration: the one object the pipeline reads.
BENCHMARK = BenchmarkType("shapes", ShapesSettings, "intact_shapes:Shapes", "three shapes drawn in three styles",
                          tasks=DOMAINS, num_classes=len(CLASSES), required=("root",), channels=3, check=check)
