"""LwF on the shared prompt + head: distil the previous task's logits on the current batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import Dataset

from intact.methods.finetune import Finetune, FinetuneConfig
from intact.regularizers.lwf import distillation_loss
from intact.regularizers.regularizer import frozen_copy


@dataclass(frozen=True)
class LwfConfig(FinetuneConfig):
    """``methods.lwf`` in config.yaml: ``lambda_lwf * T^2 * KL(old || new)`` at temperature ``T``."""

    lambda_lwf: float = 1.0
    temperature: float = 2.0


class LwfMixin:
    """Learning without Forgetting (Li & Hoiem, 2017), mixed into a method of either family.

    Domain-incremental: old and new tasks share the output layer, so the distillation covers all its
    logits. The teacher is the previous task's trainable modules (``lwf_modules``: prompt + head, or the
    network): a frozen eval-mode snapshot taken at ``begin_task`` from the loaded state, held outside the
    module tree (``train()`` cannot reach it, it is never saved).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.cfg.temperature <= 0:
            raise ValueError(f"{self.SECTION}.temperature = {self.cfg.temperature}: expected > 0")
        # a plain dict, not a ModuleDict: the snapshot must stay outside the module tree
        self.previous: dict[str, nn.Module] | None = None

    def begin_task(self, task: int, train_set: Dataset) -> None:
        if task > 0:
            self.previous = {name: frozen_copy(m) for name, m in self.lwf_modules().items()}
        super().begin_task(task, train_set)

    def extra_terms(self, x: torch.Tensor, q: torch.Tensor | None, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.previous is None or self.cfg.lambda_lwf == 0:
            return {}
        with torch.no_grad():
            old_logits = self.logits_with(self.previous, x, q)
        return {"lwf": self.cfg.lambda_lwf * distillation_loss(logits, old_logits, self.cfg.temperature)}


class LwF(LwfMixin, Finetune):
    """LwF with the frozen ViT and one shared prompt."""

    CONFIG = LwfConfig
    SECTION = "methods.lwf"
