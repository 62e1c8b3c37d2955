"""CPrompt (Gao et al., CVPR 2024, "Consistent Prompting for Rehearsal-Free Continual Learning"): per-domain prompt
pairs and classifiers with classifier and prompt consistency; declared in :mod:`intact.methods.consistent_prompt`.
Its parts, as the official code (Zhanxin-Gao/CPrompt, ``models/cprompt.py``, ``network/cprompt_net.py``) computes
them:

* :func:`ccl_loss`: classifier consistency learning - every earlier domain's (frozen) classifier reads the
  current domain's features; its softmax is pushed towards its own softmax at temperature 1 where the
  current classifier is more confident by ``margin``, and towards the flatter one at ``tau`` elsewhere.
* :func:`key_logits`: the cosine of the query with every key (one key per (domain, class)), earlier
  domains' keys detached - the prompt-key matching trained with CE on the (domain, class) index.
* :class:`ConsistentPrompt`: the method; its three terms besides the prompt-consistency CE are a penalty
  (:class:`ConsistencyTerms`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from intact.methods.shared.base import Batch, ContinualMethod, Penalty
from intact.methods.shared.frozen import QUERY, frozen_feature
from intact.models.esn import linear_init_, prompted_tokens
from intact.models.heads import Head
from intact.seeding import init_on_cpu_, task_generator


def ccl_loss(old_logits: torch.Tensor, current_logits: torch.Tensor, margin: float, tau: float) -> torch.Tensor:
    """``-sum softmax(old / T).detach() * log softmax(old)``, averaged over the batch; ``T`` = 1 where the
    current classifier's top logit exceeds the old one's by more than ``margin``, else ``tau``."""
    confident = current_logits.max(dim=1).values > old_logits.max(dim=1).values + margin
    T = torch.where(confident, 1.0, tau).to(old_logits.dtype).unsqueeze(1)
    ground = F.softmax(old_logits / T, dim=1).detach()
    return -(ground * F.log_softmax(old_logits, dim=1)).sum(dim=1).mean()


def key_logits(query: torch.Tensor, keys: torch.Tensor, seen: int, current: int | None) -> torch.Tensor:
    """Cosines (B, seen) of ``query`` with the first ``seen`` keys; with ``current`` (training), the keys
    before row ``current`` are detached (earlier domains' keys stay), as the code's ``K[:s].detach()``."""
    K = keys[:seen]
    if current is not None and current > 0:
        K = torch.cat((K[:current].detach(), K[current:]))
    return F.normalize(query.float(), dim=1) @ F.normalize(K.float(), dim=1).T


def frozen(head: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """An earlier domain's classifier on ``z``, its parameters fixed (the code's fix_branch_layer)."""
    return functional_call(head, {n: p.detach() for n, p in head.named_parameters()}, (z,))


class ConsistencyTerms(Penalty):
    """The three terms besides the prompt-consistency CE, on the features the forward pass computed with the
    current domain's prompts (``method.own_features``)."""

    def terms(self, method: ContinualMethod, batch: Batch) -> dict[str, torch.Tensor]:
        t, C, s, z = method.task, method.num_classes, method.cfg, method.own_features
        out = {"aux_ce": F.cross_entropy(method.aux_head(z), batch.y)}
        if t > 0:
            with torch.no_grad():
                current = method.heads[t](z)
            ccl = sum(ccl_loss(frozen(method.heads[k], z), current, s.margin, s.tau) for k in range(t))
            out["ccl"] = s.alpha * ccl / t
        out["key"] = F.cross_entropy(key_logits(batch.q, method.keys, (t + 1) * C, t * C), t * C + batch.y)
        return out


class ConsistentPrompt(ContinualMethod):
    """Per-domain prompt pairs and classifiers on a frozen ViT; the domain by the nearest (domain, class) key."""

    def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
        super().__init__(run, settings)
        self.backbone, self.num_classes = backbone, num_classes
        D, L = backbone.embed_dim, self.cfg.length
        self.prompts = nn.ParameterList([nn.Parameter(torch.zeros(2, L, D)) for _ in range(num_tasks)])
        self.heads = nn.ModuleList([Head(D, num_classes, run.head) for _ in range(num_tasks)])
        self.aux_head = Head(D, num_classes, run.head)
        self.keys = nn.Parameter(torch.zeros(num_tasks * num_classes, D))   #: one per (domain, class)
        self.register_buffer("domains", torch.tensor(0, dtype=torch.long))  #: domains trained
        #: optimizer steps of the current domain: the prompt-consistency draw of a step is a function of
        #: (seed, domain, step), so a resumed task replays it (the global RNG is not: a DataLoader's
        #: iterator draws its base seed from it when an epoch starts)
        self.register_buffer("step", torch.tensor(0, dtype=torch.long))
        self.own_features: torch.Tensor | None = None   #: this batch's features with the current prompts
        self.penalties.insert(0, ConsistencyTerms())

    # ---- forward: the domain's own prompts in training, the nearest key's at test ---------------------
    @frozen_feature(QUERY)  # [CLS] before the final LayerNorm, not the benchmark's: computed per task (exact)
    def query(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return prompted_tokens(self.backbone, x, {})[:, 0]

    def features(self, x: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
        """[CLS] before the final LayerNorm with ``prompts`` ((2, L, D) or (B, 2, L, D)) inserted."""
        first, second = prompts.unbind(dim=-3)
        return prompted_tokens(self.backbone, x, {0: first, self.cfg.second_block: second})[:, 0]

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, None, torch.Tensor]:
        t = self.task
        self.own_features = self.features(x, self.prompts[t])
        # prompt consistency: a random domain's prompts per image (earlier domains' fixed), domain t's classifier
        g = task_generator(self.run.seed, t, f"pcl{int(self.step)}")
        m = torch.randint(0, t + 1, (len(x),), generator=g).to(x.device)
        bank = torch.stack([p if j == t else p.detach() for j, p in enumerate(self.prompts[:t + 1])])
        return self.heads[t](self.features(x, bank[m])), None, self.query(x)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        n, C = max(int(self.domains), 1), self.num_classes
        domain = key_logits(self.query(x), self.keys, n * C, None).argmax(dim=1) // C
        z = self.features(x, torch.stack(list(self.prompts[:n]))[domain])
        return torch.stack([self.heads[d](z) for d in range(n)], dim=1).max(dim=1).values

    # ---- the task hooks ----------------------------------------------------------------------------------
    @torch.no_grad()
    def begin_task(self, task: int, train_set: Any) -> None:
        self.step.zero_()
        g = task_generator(self.run.seed, task, "prompts")
        if task == 0:
            # the code: keys orthogonal (tensor_prompt(..., ortho=True)); prompts nn.Linear(D, L) weights
            init_on_cpu_(self.keys, nn.init.orthogonal_, g)
            bound = 1 / math.sqrt(self.backbone.embed_dim)
            self.prompts[0].copy_((torch.rand(self.prompts[0].shape, generator=g) * 2 - 1) * bound)
        else:
            self.prompts[task].copy_(self.prompts[task - 1])       # the code's update_fc: the previous domain's
        # both classifiers new at every domain (the code's update_fc), PyCIL's SimpleLinear init
        for head in (self.heads[task], self.aux_head):
            for _, layer in head.linears():
                linear_init_(layer, g, bias_zero=True)

    def after_step(self) -> None:
        self.step += 1

    def param_groups(self) -> list[dict[str, Any]]:
        o, t = self.run.optim, self.task
        heads = [*self.heads[t].parameters(), *self.aux_head.parameters()]
        return [{"params": heads, "lr": o.lr_head, "name": "head"},
                {"params": [self.prompts[t], self.keys], "lr": o.lr_prompt, "name": "prompts"}]

    def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
        self.domains.fill_(task + 1)
        self.own_features = None
        return {}
