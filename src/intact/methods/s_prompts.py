"""S-Prompts (Wang et al., NeurIPS 2022): one prompt and one head per domain, the domain chosen by k-means.

Task ``t`` trains its own prompt tokens (inserted after [CLS] at the input) and its own head with plain
cross-entropy; nothing is shared between domains, so nothing is forgotten - and InTAct, which protects a
shared component, has nothing to protect (``s_prompts+intact`` is refused by the config checks). At the
end of the task, ``clusters`` k-means centres of the domain's unprompted, normalised [CLS] features are
kept; at test the nearest centre picks the domain, whose prompt and head classify the image.

The unprompted [CLS] is the frozen backbone's query: it is read from the feature caches where they
exist, both for the k-means (the end-of-task pass over the training images) and for the domain choice
at test - exactly the values the live path computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from intact.config import RunConfig, build_dataclass
from intact.data.loader import eval_batches
from intact.methods.base import ContinualMethod
from intact.models.backbone import FrozenViT
from intact.models.heads import Head
from intact.models.s_prompts import DISTANCES, choose_domain, forward_with_tokens, kmeans_centres
from intact.seeding import task_generator

@dataclass(frozen=True)
class SPromptsConfig:
    """``methods.s_prompts`` in config.yaml (official: 10 prompt tokens, k = 5, L1 distance)."""

    length: int = 10          #: prompt tokens per domain
    clusters: int = 5         #: k-means centres per domain
    distance: str = "l1"      #: l1 (the official code) | l2 (the paper's nearest neighbour)


class SPrompts(ContinualMethod):
    """Per-domain prompt tokens and heads on a frozen ViT; the domain chosen by the nearest k-means centre."""

    def __init__(self, run: RunConfig, backbone: FrozenViT, num_classes: int, num_tasks: int):
        super().__init__(run, backbone, num_classes, num_tasks)
        self.cfg = build_dataclass(SPromptsConfig, run.settings, "methods.s_prompts")
        if self.cfg.distance not in DISTANCES:
            raise ValueError(f"methods.s_prompts.distance = {self.cfg.distance!r}: expected one of {', '.join(DISTANCES)}")
        D = backbone.embed_dim
        self.prompts = nn.ParameterList([nn.Parameter(torch.zeros(self.cfg.length, D)) for _ in range(num_tasks)])
        self.heads = nn.ModuleList([Head(D, num_classes, run.head) for _ in range(num_tasks)])
        self.register_buffer("centres", torch.zeros(num_tasks, self.cfg.clusters, D))
        self.register_buffer("domains", torch.tensor(0, dtype=torch.long))   #: domains with centres

    def query(self, x: torch.Tensor) -> torch.Tensor:
        """The unprompted [CLS] (cached where possible)."""
        if "query" in self.cached:
            return self.cached["query"]
        with torch.no_grad():
            return self.backbone.query(x)

    def feature_fns(self) -> dict[str, Callable[..., torch.Tensor]]:
        return {"query": self.query}

    def begin_task(self, task: int, train_set: Dataset) -> None:
        super().begin_task(task, train_set)
        # the official prompt is an nn.Linear(D, L) weight: U(-1/sqrt(D), 1/sqrt(D)); drawn from the task's generator
        bound = 1 / math.sqrt(self.backbone.embed_dim)
        g = task_generator(self.run.seed, task, "prompts")
        with torch.no_grad():
            p = self.prompts[task]
            p.copy_((torch.rand(p.shape, generator=g, dtype=p.dtype) * 2 - 1) * bound)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        t = self.task
        z = forward_with_tokens(self.backbone, x, self.prompts[t].expand(len(x), -1, -1))
        logits = self.heads[t](z)
        ce = F.cross_entropy(logits, y)
        return ce, {"ce": ce.detach(), "acc": (logits.argmax(1) == y).float().mean().detach()}

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        n = max(int(self.domains), 1)
        domain = choose_domain(self.query(x), self.centres[:n], self.cfg.distance) if int(self.domains) else x.new_zeros(len(x), dtype=torch.long)
        tokens = torch.stack(list(self.prompts[:n]))[domain]
        z = forward_with_tokens(self.backbone, x, tokens)
        logits = torch.stack([self.heads[d](z) for d in range(n)], dim=1)       # (B, n, C)
        return logits[torch.arange(len(x), device=x.device), domain]

    @torch.no_grad()
    def end_task(self, task: int, train_set: Dataset) -> dict[str, Any]:
        """The domain's k-means centres of its training images' normalised unprompted [CLS]."""
        device = self.centres.device
        query = self.with_queries(self.query, self.cached.get("eval_query"))
        feats = torch.cat([query(x) for x, _ in eval_batches(train_set, self.run.optim.eval_batch_size, device)])
        self.centres[task] = kmeans_centres(F.normalize(feats.float(), dim=1), self.cfg.clusters).to(self.centres)
        self.domains.fill_(task + 1)
        return {"kmeans": {"clusters": self.cfg.clusters, "images": len(feats)}}

    def param_groups(self) -> list[dict[str, Any]]:
        o, t = self.run.optim, self.task
        return [
            {"params": list(self.heads[t].parameters()), "lr": o.lr_head, "name": "head"},
            {"params": [self.prompts[t]], "lr": o.lr_prompt, "name": "prompts"},
        ]
