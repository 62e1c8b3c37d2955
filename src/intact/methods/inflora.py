"""InfLoRA (Liang & Li, CVPR 2024): interference-free low-rank updates of K and V, one shared head.

Per task (official code ``methods/inflora.py``): a pass over the task's training images collects every
block's attention-input covariance; its part outside the earlier tasks' DualGPM subspace gives the new
task's fixed ``A`` (:func:`~intact.models.dualgpm.down_projection`); ``B`` trains from zero, all tasks'
``B A`` summed (:mod:`intact.models.lora`); after training a second pass updates DualGPM with the
threshold schedule. The official configs are class-incremental (one head per task's classes); in
domain-incremental learning every domain shares the classes, so the natural adaptation is one shared
head - which ``inflora+intact`` protects (the teacher for L_Feat: the previous task's LoRA, as CODA-P's
previous pool). Official ImageNet-R: rank 10, lamb 0.98, lame 1.0 (configs/paper/base.yaml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class InfloraSettings:
    """``methods.inflora``."""

    rank: int = setting(4, "LoRA rank per task and block, on K and V", minimum=1)
    lamb: float = setting(0.95, "DualGPM energy threshold after task 0, rising linearly ...", exclusiveMinimum=0, maximum=1)
    lame: float = setting(1.0, "... towards this one", exclusiveMinimum=0, maximum=1)
    #: ``later``: issue 16's runs were recorded without this key; left out of the hash while at its default
    a_scale: float = setting(1 / math.sqrt(3), "A = a_scale * singular vectors (the official code's 1/sqrt(3))",
                             later=True, exclusiveMinimum=0)


def check(s: InfloraSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    """A task's ``A`` is ``rank`` directions of the blocks' input space: at most the backbone's width."""
    if s.rank > backbone.embed_dim:
        yield "rank", f"above the backbone's width {backbone.embed_dim} (the directions of a block's input)"


def _lora(PromptMethod: type) -> type:
    """The forward path on ``PromptMethod``: the LoRA as the "pool", no query, the teacher from the cache."""
    from typing import Any

    import torch
    from torch import nn

    from intact.models.dualgpm import DualGPM
    from intact.models.lora import KVLoRA, lora_forward

    class InfLoRAForward(PromptMethod):
        def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
            self.gpm = DualGPM(self.backbone.depth, embed_dim)
            return KVLoRA(self.backbone.depth, embed_dim, self.cfg.rank, num_tasks)

        # ---- forward: no query (the LoRA is the same for every image) --------------------------------
        def query(self, x: torch.Tensor) -> torch.Tensor:
            return x.new_zeros(len(x), 0)

        def feature_fns(self) -> dict[str, Any]:
            # the previous task's model is frozen for the whole task: its feature of an image is fixed (exact
            # to cache); there is no query - the backbone itself changes, so no unprompted pass stands for it
            if self.reg.cfg is not None and self.reg.teacher is not None and self.reg.task > 0:
                return {"teacher": lambda x: self.features(x, None, self.reg.teacher)[0]}
            return {}

        def features(self, x: torch.Tensor, q: torch.Tensor | None, pool: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
            return lora_forward(self.backbone, x, pool if pool is not None else self.pool), x.new_zeros(())

    return InfLoRAForward


def implementation() -> type:
    """The method itself (imports torch: only a job calls this): the LoRA forward + DualGPM between tasks."""
    import torch

    from intact.data.loader import eval_batches
    from intact.methods.shared.prompt import PromptMethod
    from intact.models.dualgpm import down_projection, threshold
    from intact.models.lora import lora_forward

    class InfLoRA(_lora(PromptMethod)):
        """LoRA on K and V of every block (the "pool"), a shared head, DualGPM between tasks."""

        @torch.no_grad()
        def input_covariances(self, data: Any) -> list[torch.Tensor]:
            """Every block's attention-input covariance ``mean over tokens of x x^T`` over ``data`` (float64)."""
            was_training = self.training
            self.eval()
            device = next(self.head.parameters()).device
            D = self.backbone.embed_dim
            sums = [torch.zeros(D, D, dtype=torch.float64, device=device) for _ in range(self.backbone.depth)]
            tokens = [0]

            def capture(block: int, a: torch.Tensor) -> None:
                a = a.flatten(0, 1).to(torch.float64)
                sums[block].add_(a.T @ a)
                tokens[0] += a.shape[0] if block == 0 else 0

            for x, _ in eval_batches(data, self.run.optim.eval_batch_size, device):
                lora_forward(self.backbone, x, self.pool, capture)
            self.train(was_training)
            return [s / max(tokens[0], 1) for s in sums]

        def start_task(self, task: int, train_set: Any) -> None:
            super().start_task(task, train_set)   # after the anchors + teacher: the LoRA makes ``task`` current
            # the current B is zero: the covariance is that of the model after the previous task
            for b, c in enumerate(self.input_covariances(train_set)):
                free = self.gpm.free_projector(b).to(c)
                self.pool.set_down(task, b, down_projection(c, free, self.cfg.rank, self.cfg.a_scale))

        def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
            info = super().end_task(task, train_set)
            thr = threshold(task, self.num_tasks, self.cfg.lamb, self.cfg.lame)
            info["dualgpm"] = {"threshold": thr, "blocks": self.gpm.update(self.input_covariances(train_set), thr)}
            return info

    return InfLoRA


METHOD = Method("inflora", InfloraSettings, implementation, "InfLoRA (Liang & Li, CVPR 2024): rank-r LoRA on K and V "
                "of every block per task, A fixed outside the DualGPM subspace; one shared head", accepts_intact=True, check=check)
