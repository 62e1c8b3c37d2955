"""The method interface (Mammoth-style hooks) every continual-learning method implements.

A training job calls, for one task: ``begin_task`` -> ``loss`` per batch (the job owns the optimizer)
-> ``end_task``. Everything a later task needs is in ``trainable_state()`` (+ ``hypercubes``): what is
trainable, decided by ``requires_grad`` - a frozen module (the backbone) is never saved, and snapshots
(teachers, anchors) live outside the module tree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.utils.data import Dataset

from intact.config import RunConfig
from intact.data.base import Benchmark
from intact.regularizers.hypercube import Hypercube


def frozen_prefixes(module: nn.Module) -> tuple[str, ...]:
    """``name.`` of every maximal submodule that has parameters, none of them trainable."""
    out: list[str] = []
    for name, m in module.named_modules():
        params = list(m.parameters())
        if name and params and not any(p.requires_grad for p in params) and not name.startswith(tuple(out)):
            out.append(name + ".")
    return tuple(out)


class ContinualMethod(nn.Module, ABC):
    """Base class: a module (a prompt pool on a frozen backbone, or a whole network) trained one task at a time."""

    #: the optimizer the job builds for every task (fresh at each task); C-Prompt's code uses AdamW
    optimizer: type = torch.optim.Adam
    #: the benchmark's stored query cache (the unprompted [CLS]) is this method's query ``feature_fns()["query"]``;
    #: False for a method whose query is another token: its query is then computed per task (still exact)
    stored_query: bool = True

    def __init__(self, run: RunConfig, backbone: nn.Module | None, num_classes: int, num_tasks: int):
        super().__init__()
        self.run = run
        self.backbone = backbone
        self.num_classes = num_classes
        self.num_tasks = num_tasks
        self.task = 0
        #: features of the current batch read from a cache (see :mod:`intact.cache`), by name
        self.cached: dict[str, torch.Tensor] = {}

    # ---- feature caches -------------------------------------------------------------------------------
    def feature_fns(self) -> dict[str, Callable[..., torch.Tensor]]:
        """The per-image feature functions of frozen parts that ``loss`` / ``predict`` may read from a cache:
        ``"query"``: x -> q(x); ``"teacher"``: (x, q(x)) -> the teacher's feature. None by default."""
        return {}

    @contextmanager
    def using(self, **features: torch.Tensor) -> Iterator[None]:
        """Within the block, ``loss`` / ``predict`` take these features of the batch instead of computing them."""
        self.cached = features
        try:
            yield
        finally:
            self.cached = {}

    def with_queries(self, forward: Callable[[torch.Tensor], Any], queries: torch.Tensor | None) -> Callable[[torch.Tensor], Any]:
        """``forward`` for consecutive batches of a pass in order, each given its rows of ``queries`` (a cached
        query per image) - or ``forward`` itself when there is no cache."""
        if queries is None:
            return forward
        start = 0

        def run(x: torch.Tensor) -> Any:
            nonlocal start
            with self.using(query=queries[start:start + len(x)].to(x.device)):
                out = forward(x)
            start += len(x)
            return out
        return run

    @property
    def hypercubes(self) -> dict[str, Hypercube]:
        """Per-layer boxes carried from task to task (``hypercube.safetensors``); none by default."""
        return {}

    @hypercubes.setter
    def hypercubes(self, cubes: dict[str, Hypercube]) -> None:
        if cubes:
            raise ValueError(f"{type(self).__name__} keeps no hypercubes")

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

    def after_step(self) -> None:
        """Called after every optimizer step the job takes (C-Prompt's EMA head); nothing by default."""

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

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Everything a later task needs: the state outside frozen submodules (trainable parameters, the
        buffers that go with them: BatchNorm statistics, EWC's Fisher, a pool's task counter)."""
        frozen = frozen_prefixes(self)
        return {k: v for k, v in self.state_dict().items() if not k.startswith(frozen)}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        missing, unexpected = self.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith(frozen_prefixes(self))]
        if missing or unexpected:
            raise ValueError(f"state does not fit {type(self).__name__}: missing {missing}, unexpected {unexpected}")

    def num_trainable_parameters(self) -> int:
        return sum(p.numel() for g in self.param_groups() for p in g["params"])
