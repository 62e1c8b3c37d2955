"""L2P(++) (Wang et al., CVPR 2022; the prefix-tuning variant of the CODA-Prompt code): its key-prompt pool on
the prompt family; declared in :mod:`intact.methods.l2p`.

A pool of ``M`` learnable keys ``k_i`` (D) and prompts ``P_i`` (L, D). Every image selects the ``k``
prompts whose keys are most cosine-similar to its query ``q(x)``, at training and at test time alike
(no task identity). The selected prompts are split per prompt into prefix keys (first ``L/2`` rows) and
values (last ``L/2`` rows) and concatenated in selection order, so block ``l`` sees a prefix of
``k * L/2`` keys and as many values.

Top-k selection is not differentiable, so the keys learn only from the surrogate matching loss

    L_match = mean_b  sum_{i in S(b)} (1 - cos(q_b, k_i))

where ``S(b)`` is sample ``b``'s own selection (the L2P paper's sum over the selected keys, averaged over
the batch). The reference code indexes the (B, M) similarity matrix with the (B, k) index tensor and
sums a (B, B, k) block - every sample pulls every other sample's keys; that slip is not reproduced.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from intact.methods.shared.prompt import PromptMethod
from intact.models.prefix import Prefix
from intact.models.shared_prompt import check_length, split_prompt, uniform_


def top_k_keys(query: torch.Tensor, keys: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine similarities ``(B, M)`` of queries to keys and each query's top-``k`` key indices ``(B, k)``."""
    cos = F.normalize(query, dim=1) @ F.normalize(keys, dim=1).T
    return cos, cos.topk(k, dim=1).indices


def matching_loss(cos: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Per-sample matching loss: each sample's own selected keys, summed over the selection, mean over the batch."""
    return (1.0 - cos.gather(1, idx)).sum(dim=1).mean()


class L2PPool(nn.Module):
    """One key per prompt; one top-k selection per image, shared by all prompted layers."""

    def __init__(self, embed_dim: int, pool_size: int, length: int, top_k: int, layers: tuple[int, ...] = (0,),
                 match_weight: float = 1.0):
        super().__init__()
        check_length(length, "methods.l2p.length")
        if not 1 <= top_k <= pool_size:
            raise ValueError(f"methods.l2p.top_k = {top_k}: expected 1 <= top_k <= pool_size = {pool_size}")
        self.top_k = top_k
        self.layers = tuple(layers)
        self.match_weight = match_weight
        self.keys = nn.Parameter(torch.zeros(pool_size, embed_dim))
        self.prompts = nn.ParameterDict({str(l): nn.Parameter(torch.zeros(pool_size, length, embed_dim))
                                         for l in self.layers})

    def begin_task(self, task: int, generator: torch.Generator) -> None:
        # The pool is shared by all tasks: drawn once, then trained on from task to task.
        if task == 0:
            uniform_(self.keys, generator)
            for p in self.prompts.values():
                uniform_(p, generator)

    def select(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos (B, M), idx (B, k))``: the similarities and every image's selected prompts."""
        return top_k_keys(query.detach(), self.keys, self.top_k)

    def forward(self, query: torch.Tensor) -> tuple[Prefix, torch.Tensor]:
        cos, idx = self.select(query)
        prefix: Prefix = {l: split_prompt(self.prompts[str(l)][idx]) for l in self.layers}
        aux = self.match_weight * matching_loss(cos, idx) if self.training else query.new_zeros(())
        return prefix, aux


class L2P(PromptMethod):
    """L2P++: the key-prompt pool on a frozen ViT, the shared head."""

    def build_pool(self, embed_dim: int, num_tasks: int) -> L2PPool:
        s = self.cfg
        return L2PPool(embed_dim, s.pool_size, s.length, s.top_k, s.layers, s.match_weight)
