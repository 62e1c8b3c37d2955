"""The benchmark contract every task sequence implements (torch-free to import: a declaration module may
subclass it at module level, and validating a config never imports torch)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils.data import Dataset


class Benchmark(ABC):
    """A domain-incremental sequence: every task has the full label space and one input domain.

    Built once by ``prepare`` (writes ``manifest.json`` plus data files), then opened read-only by
    every job through :meth:`open`. A type declared ``pretrains=True`` also defines :meth:`pretrain_set` and
    :meth:`clean_test_set`.
    """

    def __init__(self, manifest_path: str | Path):
        self.manifest_path = Path(manifest_path)
        self.root = self.manifest_path.parent
        self.manifest = json.loads(self.manifest_path.read_text())  # not intact.io: that imports torch

    @property
    def name(self) -> str:
        return self.manifest["benchmark"]

    @property
    def task_names(self) -> list[str]:
        return [t["name"] for t in self.manifest["tasks"]]

    @property
    def num_tasks(self) -> int:
        return len(self.manifest["tasks"])

    @property
    def num_classes(self) -> int:
        return int(self.manifest["num_classes"])

    def use_settings(self, cfg) -> None:  # noqa: B027 (an optional hook: nothing by default)
        """Take the run's benchmark settings that apply when data is read (the image benchmarks' validation
        part); digits fixes its validation part when it is prepared, so nothing here."""

    def use_view(self, train_crop: str, test_resize: int | None) -> None:
        """Take the run's view of prepared images (``optim.train_crop``, ``optim.test_resize``): the image
        benchmarks'; a benchmark without prepared images takes only the default (the config checks say so)."""
        if train_crop != "benchmark" or test_resize is not None:
            raise ValueError(f"benchmark {self.name!r} has no prepared images to crop: optim.train_crop and "
                             "optim.test_resize apply to the image benchmarks only")

    @abstractmethod
    def train_set(self, task: int, eval_split: str = "test") -> Dataset:
        """Training data of ``task``: the whole train split, or train minus val when ``eval_split='val'``."""

    @abstractmethod
    def eval_set(self, task: int, eval_split: str = "test") -> Dataset:
        """The test split of ``task`` (or its validation part when ``eval_split='val'``)."""

    # the pretraining contract: a type declared ``pretrains=True`` (its backbone pretrains on it) defines both;
    # the declaration refuses one that does not (intact.data.declare.PRETRAINING)
    def pretrain_set(self) -> Dataset:
        """The clean images a backbone pretrains on (``backbones.<b>.pretrain``), none of them in a task's split."""
        raise NotImplementedError(f"benchmark {self.name!r} ({type(self).__qualname__}) has no pretrain_set()")

    def clean_test_set(self) -> Dataset:
        """The test images without a domain: the pretrained backbone's clean accuracy (``backbone.json``)."""
        raise NotImplementedError(f"benchmark {self.name!r} ({type(self).__qualname__}) has no clean_test_set()")

    def preview(self) -> Preview:
        """What the benchmark shows of its tasks, a few test images per task: the picture
        ``results/figures/<benchmark>/domains.png`` that the report layer draws (:mod:`intact.report.plots`)."""
        raise NotImplementedError(f"benchmark {self.name!r} ({type(self).__qualname__}) has no preview()")


@dataclass(frozen=True)
class Preview:
    """A benchmark's preview: rows of images, each with its class, drawn in this order (one row per task, and
    any other row, e.g. the clean images the domains transform)."""

    title: str
    rows: dict[str, Any]              #: row name -> images, an array (n, H, W, C) of floats in [0, 1]
    labels: dict[str, list[int]]      #: row name -> each image's class
    notes: dict[str, str] = field(default_factory=dict)   #: row name -> a second line under its name (counts)
