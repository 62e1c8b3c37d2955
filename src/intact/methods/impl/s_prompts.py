"""S-Prompts (Wang et al., NeurIPS 2022): one prompt and one head per domain, the domain chosen by k-means;
declared in :mod:`intact.methods.s_prompts`. Its parts: input prompt tokens, domain centres, nearest-centre choice.

As the official ViT version (``models/sinet.py``, ``methods/sprompt.py``): a domain's prompt tokens are
inserted right after [CLS], after the position embedding (the prompts get none); the domain centres are
k-means centres of the L2-normalised unprompted [CLS] features of the domain's training images; at test
the domain whose nearest centre is closest to an image's normalised feature is chosen. The official
distance is ``sum |f - c|`` (its ``((f - c) ** 2) ** 0.5`` summed: L1); ``distance: l2`` is the paper's
reading (nearest neighbour in the usual, Euclidean sense).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from intact.methods.shared.base import ContinualMethod, batches
from intact.methods.shared.frozen import QUERY, frozen_feature
from intact.models.backbone import FrozenViT
from intact.models.heads import Head
from intact.seeding import task_generator

DISTANCES = ("l1", "l2")


def forward_with_tokens(backbone: FrozenViT, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The final-LayerNorm [CLS] with ``tokens`` (B, L, D) inserted after [CLS] at the input."""
    h = backbone.tokens(x)
    h = torch.cat((h[:, :1], tokens.to(h.dtype), h[:, 1:]), dim=1)
    return backbone.vit.norm(backbone.vit.blocks(h))[:, 0]


def kmeans_centres(features: torch.Tensor, k: int, seed: int = 0) -> torch.Tensor:
    """k-means centres (k, D) of ``features`` (N, D), as the official ``KMeans(n_clusters=5, random_state=0)``
    (scikit-learn, k-means++ seeding; ``n_init=10``, its default at the time)."""
    from sklearn.cluster import KMeans

    if len(features) < k:
        raise ValueError(f"methods.s_prompts.clusters = {k}: the domain has only {len(features)} training images")
    km = KMeans(n_clusters=k, random_state=seed, n_init=10).fit(features.detach().cpu().double().numpy())
    return torch.from_numpy(np.asarray(km.cluster_centers_)).to(features.dtype)


def choose_domain(features: torch.Tensor, centres: torch.Tensor, distance: str = "l1") -> torch.Tensor:
    """Per image, the domain (index into ``centres`` (T, k, D)) with the nearest centre to its normalised feature."""
    f = F.normalize(features.float(), dim=1)
    c = centres.float()
    diff = f[:, None, None, :] - c[None]                               # (B, T, k, D)
    d = diff.abs().sum(-1) if distance == "l1" else diff.pow(2).sum(-1).sqrt()
    return d.min(dim=2).values.argmin(dim=1)


class SPrompts(ContinualMethod):
    """Per-domain prompt tokens and heads on a frozen ViT; the domain chosen by the nearest k-means centre."""

    def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
        super().__init__(run, settings)
        self.backbone = backbone
        D = backbone.embed_dim
        self.prompts = nn.ParameterList([nn.Parameter(torch.zeros(self.cfg.length, D)) for _ in range(num_tasks)])
        self.heads = nn.ModuleList([Head(D, num_classes, run.head) for _ in range(num_tasks)])
        self.register_buffer("centres", torch.zeros(num_tasks, self.cfg.clusters, D))
        self.register_buffer("domains", torch.tensor(0, dtype=torch.long))   #: domains with centres

    @frozen_feature(QUERY, benchmark_cache=True)
    def query(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone.query(x)

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        t = self.task
        z = forward_with_tokens(self.backbone, x, self.prompts[t].expand(len(x), -1, -1))
        return self.heads[t](z), None, None

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        n = max(int(self.domains), 1)
        domain = (choose_domain(self.query(x), self.centres[:n], self.cfg.distance) if int(self.domains)
                  else x.new_zeros(len(x), dtype=torch.long))
        tokens = torch.stack(list(self.prompts[:n]))[domain]
        z = forward_with_tokens(self.backbone, x, tokens)
        logits = torch.stack([self.heads[d](z) for d in range(n)], dim=1)       # (B, n, C)
        return logits[torch.arange(len(x), device=x.device), domain]

    def param_groups(self) -> list[dict[str, Any]]:
        o, t = self.run.optim, self.task
        return [
            {"params": list(self.heads[t].parameters()), "lr": o.lr_head, "name": "head"},
            {"params": [self.prompts[t]], "lr": o.lr_prompt, "name": "prompts"},
        ]

    def begin_task(self, task: int, train_set: Any) -> None:
        # the official prompt is an nn.Linear(D, L) weight: U(-1/sqrt(D), 1/sqrt(D)); drawn from the task's generator
        bound = 1 / math.sqrt(self.backbone.embed_dim)
        g = task_generator(self.run.seed, task, "prompts")
        with torch.no_grad():
            p = self.prompts[task]
            p.copy_((torch.rand(p.shape, generator=g, dtype=p.dtype) * 2 - 1) * bound)

    @torch.no_grad()
    def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
        """The domain's k-means centres of its training images' normalised unprompted [CLS]."""
        feats = torch.cat([self.query(x) for x, _ in batches(self, train_set)])
        self.centres[task] = kmeans_centres(F.normalize(feats.float(), dim=1), self.cfg.clusters).to(self.centres)
        self.domains.fill_(task + 1)
        return {"kmeans": {"clusters": self.cfg.clusters, "images": len(feats)}}
