"""InfLoRA's low-rank updates of the frozen ViT's keys and values (Liang & Li, CVPR 2024).

In every block ``b``, task ``s`` owns a down-projection ``A_s`` (r x D, fixed when the task starts, a
buffer) and an up-projection ``B_s`` (D x r, trained from zero) for the key and for the value:

    k = x W_K^T + sum_{s <= t} x A_{s,K}^T B_{s,K}^T,    v likewise,

with ``x`` the block's attention input (after ``norm1``) and ``t`` the current task - all tasks summed,
as the official ``Attention_LoRA.forward``. Only ``B_t`` trains (earlier tasks' B are frozen). Since
``A_t`` is fixed, the update of task t lies in the row space of ``A_t``: ``(B_t A_t) x = 0`` for every
input ``x`` orthogonal to A_t's rows - which InfLoRA chooses outside earlier tasks' input subspace
(:mod:`intact.models.dualgpm`).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from timm.layers import Attention
from torch import nn

from intact.models.backbone import FrozenViT
from intact.models.task_index import TaskIndexed

#: (block index, attention input ``x`` of shape (B, N, D)) -> None; sees every block's input in a pass
Capture = Callable[[int, torch.Tensor], None]


class KVLoRA(TaskIndexed):
    """Per-task LoRA factors on K and V of every block; ``task`` decides which are summed and which trains."""

    def __init__(self, depth: int, dim: int, rank: int, num_tasks: int):
        super().__init__()
        if rank < 1 or rank > dim:
            raise ValueError(f"methods.inflora.rank = {rank}: expected 1 <= rank <= {dim} (the embedding width)")
        self.depth, self.dim, self.rank = depth, dim, rank
        #: A[s, b, 0 | 1] = task s's down-projection of block b's key | value (fixed, set by begin_task)
        self.register_buffer("A", torch.zeros(num_tasks, depth, 2, rank, dim))
        #: B[s][b, 0 | 1] = task s's up-projection of block b's key | value (trained from zero)
        self.B = nn.ParameterList([nn.Parameter(torch.zeros(depth, 2, dim, rank)) for _ in range(num_tasks)])
        self.register_task()

    def begin_task(self, task: int, generator: Optional[torch.Generator] = None) -> None:
        """Make ``task`` current: its B (zero) is the only one that trains (nothing is drawn at random)."""
        self.set_task(task)
        for s, b in enumerate(self.B):
            b.requires_grad_(s == task)

    def set_down(self, task: int, block: int, a: torch.Tensor) -> None:
        """Fix task ``task``'s down-projection of ``block`` (the same for K and V, as the official code)."""
        with torch.no_grad():
            self.A[task, block] = a.to(self.A)

    def update(self, task: int, block: int) -> torch.Tensor:
        """Task ``task``'s update ``B A`` of ``block``'s key and value weights: (2, D, D)."""
        return self.B[task][block] @ self.A[task, block]

    def factors(self, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Tasks 0..t's factors of ``block`` concatenated along the rank: A (2, (t+1) r, D), B (2, D, (t+1) r)."""
        t = self.task_index
        A = self.A[:t + 1, block].permute(1, 0, 2, 3).reshape(2, (t + 1) * self.rank, self.dim)
        B = torch.cat([self.B[s][block] for s in range(t + 1)], dim=2)
        return A, B


def lora_attention(attn: Attention, x: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """timm ``Attention.forward`` with ``x A^T B^T`` added to the keys (index 0) and values (index 1)."""
    Bn, N, C = x.shape
    H, hd = attn.num_heads, attn.head_dim
    qkv = attn.qkv(x)
    delta = torch.einsum("bnd,krd->kbnr", x, A.to(x.dtype))               # (2, B, N, R)
    delta = torch.einsum("kbnr,kdr->kbnd", delta, B.to(x.dtype))          # (2, B, N, D)
    q, k, v = qkv.reshape(Bn, N, 3, C).unbind(2)
    k, v = k + delta[0].to(k.dtype), v + delta[1].to(v.dtype)     # (autocast: one dtype for attention)
    q, k, v = (t.reshape(Bn, N, H, hd).transpose(1, 2) for t in (q, k, v))
    q, k = attn.q_norm(q), attn.k_norm(k)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=attn.attn_drop.p if attn.training else 0.0)
    out = attn.norm(out.transpose(1, 2).reshape(Bn, N, attn.attn_dim))
    return attn.proj_drop(attn.proj(out))


def lora_forward(backbone: FrozenViT, x: torch.Tensor, lora: KVLoRA, capture: Optional[Capture] = None) -> torch.Tensor:
    """The final-LayerNorm [CLS] of ``backbone`` with ``lora``'s updates in every block; ``capture`` sees
    each block's attention input (InfLoRA's input covariance)."""
    h = backbone._tokens(x)
    for i, blk in enumerate(backbone.vit.blocks):
        a = blk.norm1(h)
        if capture is not None:
            capture(i, a)
        A, B = lora.factors(i)
        h = h + blk.drop_path1(blk.ls1(lora_attention(blk.attn, a, A, B)))
        h = h + blk.drop_path2(blk.ls2(blk.mlp(blk.norm2(h))))
    return backbone.vit.norm(h)[:, 0]
