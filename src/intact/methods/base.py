"""The method interface (Mammoth-style hooks) every continual-learning method implements.

A training job calls, for one task: ``begin_task`` -> ``loss`` per batch (the job owns the optimizer)
-> ``end_task``. Everything a later task needs is in ``trainable_state()`` (+ ``hypercubes``); the frozen
backbone is never saved with it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from intact.config import RunConfig
from intact.data.base import Benchmark
from intact.models.backbone import FrozenViT
from intact.regularizers.hypercube import Hypercube


class ContinualMethod(nn.Module, ABC):
    """Base class: a trainable module on a frozen backbone, trained one task at a time."""

    def __init__(self, run: RunConfig, backbone: FrozenViT, num_classes: int, num_tasks: int):
        super().__init__()
        self.run = run
        self.backbone = backbone
        self.num_classes = num_classes
        self.num_tasks = num_tasks
        self.task = 0
        #: cumulative hypercubes after the last finished task, per tracked layer
        self.hypercubes: dict[str, Hypercube] = {}

    # ---- hooks ----------------------------------------------------------------------------------
    def training_data(self, bench: Benchmark, task: int) -> Dataset:
        """The data ``task`` trains on (and ``end_task`` sees): by default the task's own training split."""
        return bench.train_set(task, self.run.eval_split)

    def begin_task(self, task: int, train_set: Dataset) -> None:
        """Prepare for ``task`` (new prompt components, teacher snapshots, ...)."""
        self.task = task

    @abstractmethod
    def loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training loss of one batch and its named terms (detached values for logging)."""

    def end_task(self, task: int, train_set: Dataset) -> dict[str, Any]:
        """Finish ``task`` (hypercubes, certificates); return what ``train.json`` should record."""
        return {}

    @abstractmethod
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Logits at test time (no task identity)."""

    # ---- optimisation & state ---------------------------------------------------------------------
    @abstractmethod
    def param_groups(self) -> list[dict[str, Any]]:
        """Optimizer parameter groups with their learning rates."""

    #: submodules never saved: the frozen backbone and snapshots rebuilt from the previous state
    NOT_SAVED = ("backbone.", "teacher.")

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Everything a later task needs (the frozen backbone and derived snapshots excluded)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith(self.NOT_SAVED)}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        missing, unexpected = self.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith(self.NOT_SAVED)]
        if missing or unexpected:
            raise ValueError(f"state does not fit {type(self).__name__}: missing {missing}, unexpected {unexpected}")

    def num_trainable_parameters(self) -> int:
        return sum(p.numel() for g in self.param_groups() for p in g["params"])
