"""Shared machinery of prompt-based methods: query -> prompt pool -> prompted [CLS] -> head.

Subclasses build the pool (CODA-Prompt, L2P, DualPrompt, ...); ``create_method`` refuses prompt layers past the
backbone's depth (the declaration's ``layer_keys``). Every prompt method watches its head
(:func:`~intact.methods.shared.penalties.watch_layers`: every Linear protected against its own input's box; the
feature is the [CLS] token read by the first Linear; the teacher is the previous task's pool): without
``+intact`` the last penalty only records the hypercubes and the certificate, with ``+intact`` it is InTAct's,
with the four terms.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from intact.methods.shared.base import Batch, ContinualMethod
from intact.methods.shared.frozen import QUERY, frozen_feature
from intact.methods.shared.penalties import watch_layers
from intact.models.backbone import FrozenViT
from intact.models.heads import Head
from intact.models.prefix import Prefix
from intact.seeding import task_generator
from intact.settings import RunConfig


class PromptMethod(ContinualMethod):
    """A prompt pool + shared head on a frozen ViT, optionally regularised by InTAct."""

    def __init__(self, run: RunConfig, settings: Any, backbone: FrozenViT, num_classes: int, num_tasks: int):
        super().__init__(run, settings)
        self.backbone = backbone
        self.pool = self.build_pool(backbone.embed_dim, num_tasks)
        self.head = Head(backbone.embed_dim, num_classes, run.head)
        layers = [n for n, _ in self.head.linears()]
        # the reference code counts CE twice whenever InTAct is on (kept only behind its switch)
        self.intact = watch_layers(run.intact, self.head, layers, feature=layers[0], teacher_source=self.pool,
                                   teacher_feature=self.teacher_feature, doubles_ce=True)
        self.penalties.append(self.intact)

    @abstractmethod
    def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
        """The prompt pool: ``pool(query) -> (prefix, auxiliary loss)``, with ``pool.begin_task``."""

    # ---- forward ------------------------------------------------------------------------------
    @frozen_feature(QUERY, benchmark_cache=True)
    def query(self, x: torch.Tensor) -> torch.Tensor:
        """The frozen backbone's unprompted [CLS] of ``x``."""
        return self.backbone.query(x)

    @frozen_feature("teacher", when=lambda self: self.intact.teacher is not None)
    def teacher_feature(self, x: torch.Tensor, q: torch.Tensor | None = None) -> torch.Tensor:
        """InTAct's teacher's [CLS] of an image (given its query): fixed for the whole task."""
        return self.features(x, q, self.intact.teacher)[0]

    def prompt(self, pool: nn.Module, q: torch.Tensor) -> tuple[Prefix, torch.Tensor]:
        return pool(q)

    def features(self, x: torch.Tensor, q: torch.Tensor,
                 pool: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompted [CLS] feature and the pool's auxiliary loss."""
        prefix, aux = self.prompt(pool if pool is not None else self.pool, q)
        return self.backbone(x, prefix), aux

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        z, _ = self.features(x, self.query(x))
        return self.head(z)

    # ---- hooks ----------------------------------------------------------------------------------
    def begin_task(self, task: int, train_set: Dataset) -> None:
        # after the penalties' snapshots: the anchors and the teacher are the previous task's head and pool
        self.pool.begin_task(task, task_generator(self.run.seed, task, "prompts"))

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q = self.query(x)
        z, aux = self.features(x, q)
        return self.head(z), aux, q

    # LwF's view of the family (LwfPenalty): what its snapshot holds and how it computes logits
    def snapshot_modules(self) -> dict[str, nn.Module]:
        return {"pool": self.pool, "head": self.head}

    def logits_with(self, modules: dict[str, nn.Module], batch: Batch) -> torch.Tensor:
        return modules["head"](self.features(batch.x, batch.q, modules["pool"])[0])

    def param_groups(self) -> list[dict[str, Any]]:
        o = self.run.optim
        return [
            {"params": [p for p in self.head.parameters() if p.requires_grad], "lr": o.lr_head, "name": "head"},
            {"params": [p for p in self.pool.parameters() if p.requires_grad], "lr": o.lr_prompt, "name": "prompts"},
        ]
