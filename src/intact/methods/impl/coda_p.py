"""CODA-Prompt (Smith et al., CVPR 2023): its decomposed prompt pool (the paper's Eq. coda_attn) on the prompt
family (:class:`~intact.methods.shared.prompt.PromptMethod`); declared in :mod:`intact.methods.coda_p`.

Per prompted layer ``l``: keys ``K`` (M, D), attention vectors ``A`` (M, D) and prompt components
``P`` (M, L_p, D). Each task owns ``M / T`` new components; earlier ones are detached while a later
task trains. The prompt of an image is ``p(x) = sum_m alpha_m(x) P_m`` with
``alpha_m = cos(q(x) * A_m, K_m)`` (the CODA-Prompt form: cosine, no softmax), and its first / second
half are the prefix keys / values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from intact.methods.shared.prompt import PromptMethod
from intact.models.prefix import Prefix
from intact.models.task_index import TaskIndexed


def gram_schmidt_(t: torch.Tensor, start: int, end: int, generator: torch.Generator) -> None:
    """Re-draw rows ``start:end`` of ``t`` (flattened per row) orthonormal to rows ``:end`` (in place).

    CODA-Prompt initialises each task's components orthogonal to the earlier ones; when a pool holds
    more rows than dimensions, orthogonality is impossible and rows are only normalised.
    """
    # computed on the CPU (with CPU draws) and copied back: the same initial pool on every device
    flat = t.data.view(t.shape[0], -1).cpu()
    dim = flat.shape[1]
    new = torch.randn(end - start, dim, generator=generator, dtype=flat.dtype)
    basis = [flat[i] / flat[i].norm().clamp_min(1e-12) for i in range(start)] if start <= dim else []
    for j in range(end - start):
        v = new[j]
        if len(basis) < dim:
            for b in basis:
                v = v - (v @ b) * b
        v = v / v.norm().clamp_min(1e-12)
        basis.append(v)
        flat[start + j] = v
    t.data.view(t.shape[0], -1)[start:end] = flat[start:end].to(t.device)


def ortho_penalty(t: torch.Tensor) -> torch.Tensor:
    """CODA's orthogonality penalty ``mean((T T^T - I)^2)`` on flattened rows."""
    t = t.flatten(1)
    return ((t @ t.T - torch.eye(t.shape[0], device=t.device)) ** 2).mean()


class CodaPromptPool(TaskIndexed):
    """The component pool; ``task`` decides which components exist and which train."""

    def __init__(self, embed_dim: int, pool_size: int, length: int, layers: tuple[int, ...], num_tasks: int,
                 ortho_mu: float = 0.0):
        super().__init__()
        if pool_size < num_tasks:
            raise ValueError(f"methods.coda_p.pool_size = {pool_size} gives no component per task for {num_tasks} "
                             f"tasks (expected >= {num_tasks})")
        self.per_task = pool_size // num_tasks
        self.length = length
        self.layers = tuple(layers)
        self.ortho_mu = ortho_mu
        self.keys = nn.ParameterDict()
        self.attn = nn.ParameterDict()
        self.prompts = nn.ParameterDict()
        for layer in self.layers:
            self.keys[str(layer)] = nn.Parameter(torch.zeros(pool_size, embed_dim))
            self.attn[str(layer)] = nn.Parameter(torch.zeros(pool_size, embed_dim))
            self.prompts[str(layer)] = nn.Parameter(torch.zeros(pool_size, length, embed_dim))
        self.register_task()

    def components(self, task: int | None = None) -> tuple[int, int]:
        """(first trainable, end) component indices of ``task`` (default: the current one)."""
        t = self.task_index if task is None else task
        return t * self.per_task, (t + 1) * self.per_task

    def begin_task(self, task: int, generator: torch.Generator) -> None:
        """Make ``task`` current and initialise its components orthogonal to the earlier ones."""
        self.set_task(task)
        s, f = self.components(task)
        with torch.no_grad():
            for params in (self.keys, self.attn, self.prompts):
                for p in params.values():
                    gram_schmidt_(p, s, f, generator)

    def forward(self, query: torch.Tensor) -> tuple[Prefix, torch.Tensor]:
        """Per-sample prefixes for the prompted layers and the (weighted) orthogonality loss."""
        s, f = self.components()
        aux = query.new_zeros(())
        prefix: Prefix = {}
        for layer in self.layers:
            K, A, P = self.keys[str(layer)][:f], self.attn[str(layer)][:f], self.prompts[str(layer)][:f]
            if self.training:
                K = torch.cat((K[:s].detach(), K[s:]))
                A = torch.cat((A[:s].detach(), A[s:]))
                P = torch.cat((P[:s].detach(), P[s:]))
                if self.ortho_mu > 0:
                    aux = aux + self.ortho_mu * (ortho_penalty(K) + ortho_penalty(A) + ortho_penalty(P))
            q = F.normalize(query.unsqueeze(1) * A.unsqueeze(0), dim=2)       # (B, f, D)
            alpha = torch.einsum("bkd,kd->bk", q, F.normalize(K, dim=1))    # cos(q * A, K)
            p = torch.einsum("bk,kld->bld", alpha, P)                       # (B, L_p, D)
            half = self.length // 2
            prefix[layer] = (p[:, :half], p[:, half:])
        return prefix, aux


class CodaPrompt(PromptMethod):
    """CODA-Prompt: the component pool on a frozen ViT, the shared head."""

    def build_pool(self, embed_dim: int, num_tasks: int) -> CodaPromptPool:
        s = self.cfg
        return CodaPromptPool(embed_dim, s.pool_size, s.length, s.layers, num_tasks, s.ortho_mu)
