"""S-Prompts (Wang et al., NeurIPS 2022): one prompt and one head per domain, the domain chosen by k-means.

Task ``t`` trains its own prompt tokens (inserted after [CLS] at the input) and its own head with plain
cross-entropy; nothing is shared between domains, so nothing is forgotten - and InTAct, which protects a
shared component, has nothing to protect (``s_prompts+intact`` is refused, with the declaration's reason).
At the end of the task, ``clusters`` k-means centres of the domain's unprompted, normalised [CLS] features
are kept; at test the nearest centre picks the domain, whose prompt and head classify the image.

The unprompted [CLS] is the frozen backbone's query: it is read from the feature caches where they
exist, both for the k-means (the end-of-task pass over the training images) and for the domain choice
at test - exactly the values the live path computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class SPromptsSettings:
    """``methods.s_prompts`` (official: 10 prompt tokens, k = 5, L1 distance)."""

    length: int = setting(10, "prompt tokens per domain, inserted after [CLS]", minimum=1)
    clusters: int = setting(5, "k-means centres per domain", minimum=1)
    distance: str = setting("l1", "l1 (the official code) | l2 (the paper's nearest neighbour)", enum=["l1", "l2"])


def _per_domain(ContinualMethod: type) -> type:
    """The per-domain prompts and heads on ``ContinualMethod``: training one domain, predicting by the nearest centre."""
    from typing import Any, Callable

    import torch
    from torch import nn

    from intact.models.heads import Head
    from intact.models.s_prompts import choose_domain, forward_with_tokens

    class SPromptsDomains(ContinualMethod):
        def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
            super().__init__(run, settings, backbone, num_classes, num_tasks)
            D = backbone.embed_dim
            self.prompts = nn.ParameterList([nn.Parameter(torch.zeros(self.cfg.length, D)) for _ in range(num_tasks)])
            self.heads = nn.ModuleList([Head(D, num_classes, run.head) for _ in range(num_tasks)])
            self.register_buffer("centres", torch.zeros(num_tasks, self.cfg.clusters, D))
            self.register_buffer("domains", torch.tensor(0, dtype=torch.long))   #: domains with centres

        def feature_fns(self) -> dict[str, Callable[..., torch.Tensor]]:
            return {"query": self.query}

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

    return SPromptsDomains


def implementation() -> type:
    """The method itself (imports torch: only a job calls this): the per-domain parts + the task hooks."""
    import math
    from typing import Any

    import torch
    import torch.nn.functional as F

    from intact.data.loader import eval_batches
    from intact.methods.shared.base import ContinualMethod
    from intact.models.s_prompts import kmeans_centres
    from intact.seeding import task_generator

    class SPrompts(_per_domain(ContinualMethod)):
        """Per-domain prompt tokens and heads on a frozen ViT; the domain chosen by the nearest k-means centre."""

        def start_task(self, task: int, train_set: Any) -> None:
            # the official prompt is an nn.Linear(D, L) weight: U(-1/sqrt(D), 1/sqrt(D)); drawn from the task's generator
            bound = 1 / math.sqrt(self.backbone.embed_dim)
            g = task_generator(self.run.seed, task, "prompts")
            with torch.no_grad():
                p = self.prompts[task]
                p.copy_((torch.rand(p.shape, generator=g, dtype=p.dtype) * 2 - 1) * bound)

        @torch.no_grad()
        def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
            """The domain's k-means centres of its training images' normalised unprompted [CLS]."""
            device = self.centres.device
            query = self.with_queries(self.query, self.cached.get("eval_query"))
            feats = torch.cat([query(x) for x, _ in eval_batches(train_set, self.run.optim.eval_batch_size, device)])
            self.centres[task] = kmeans_centres(F.normalize(feats.float(), dim=1), self.cfg.clusters).to(self.centres)
            self.domains.fill_(task + 1)
            return {"kmeans": {"clusters": self.cfg.clusters, "images": len(feats)}}

    return SPrompts


METHOD = Method("s_prompts", SPromptsSettings, implementation,
                "S-Prompts (Wang et al., NeurIPS 2022): per-domain prompt tokens after [CLS] and per-domain heads; "
                "the domain by the nearest k-means centre", accepts_intact=False,
                intact_refusal="it shares no component between domains (one prompt and one head per domain, the "
                               "domain picked by k-means), so InTAct has nothing to protect")
