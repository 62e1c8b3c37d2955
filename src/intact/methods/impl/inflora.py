"""InfLoRA (Liang & Li, CVPR 2024): interference-free low-rank updates of K and V, one shared head; declared in
:mod:`intact.methods.inflora`. Its parts: the LoRA factors (:class:`KVLoRA`), the DualGPM subspace they keep out
of (:class:`DualGPM`) and the method (:class:`InfLoRA`).

**The LoRA.** In every block ``b``, task ``s`` owns a down-projection ``A_s`` (r x D, fixed when the task starts, a
buffer) and an up-projection ``B_s`` (D x r, trained from zero) for the key and for the value:

    k = x W_K^T + sum_{s <= t} x A_{s,K}^T B_{s,K}^T,    v likewise,

with ``x`` the block's attention input (after ``norm1``) and ``t`` the current task - all tasks summed,
as the official ``Attention_LoRA.forward``. Only ``B_t`` trains (earlier tasks' B are frozen). Since
``A_t`` is fixed, the update of task t lies in the row space of ``A_t``: ``(B_t A_t) x = 0`` for every
input ``x`` orthogonal to A_t's rows - which InfLoRA chooses outside earlier tasks' input subspace.

**DualGPM**, the per-block input subspace of earlier tasks that InfLoRA keeps its new updates out of.

Follows the official InfLoRA code (``update_DualGPM``). Per block it keeps an orthonormal basis and its
kind: ``remove`` - the basis spans the protected subspace ``M`` (projector onto the free space
``I - U U^T``); ``retain`` - once ``M`` fills more than half of the D dimensions, the basis spans the
*free* space instead (projector ``U U^T``), the smaller of the two. After each task the protected
subspace grows by the directions of the task's input covariance ``C`` that carry more energy than the
threshold ``lamb + (lame - lamb) * t / T`` leaves out (energy = squared singular values of ``C``, as the
code; GPM computes them of the representation matrix).

The state is fixed-shape buffers (saved with the method's state): ``basis`` (depth, D, D; float32, the
SVDs run in float64) whose first ``dims[b]`` columns are the basis, ``retain[b]`` its kind - 28 MB per
task's state on ViT-B/16.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import torch
import torch.nn.functional as F
from timm.layers import Attention
from torch import nn

from intact.methods.shared.base import batches
from intact.methods.shared.prompt import PromptMethod
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

    def begin_task(self, task: int, generator: torch.Generator | None = None) -> None:
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


def lora_forward(backbone: FrozenViT, x: torch.Tensor, lora: KVLoRA,
                 capture: Capture | None = None) -> torch.Tensor:
    """The final-LayerNorm [CLS] of ``backbone`` with ``lora``'s updates in every block; ``capture`` sees
    each block's attention input (InfLoRA's input covariance)."""
    h = backbone.tokens(x)
    for i, blk in enumerate(backbone.vit.blocks):
        a = blk.norm1(h)
        if capture is not None:
            capture(i, a)
        A, B = lora.factors(i)
        h = h + blk.drop_path1(blk.ls1(lora_attention(blk.attn, a, A, B)))
        h = h + blk.drop_path2(blk.ls2(blk.mlp(blk.norm2(h))))
    return backbone.vit.norm(h)[:, 0]


def threshold(task: int, num_tasks: int, lamb: float, lame: float) -> float:
    """The energy threshold after ``task`` (0-based): ``lamb`` at the first task, rising linearly towards
    ``lame``."""
    return (lame - lamb) * task / num_tasks + lamb


def _energy(c: torch.Tensor) -> torch.Tensor:
    return (torch.linalg.svdvals(c) ** 2).sum()


class DualGPM(nn.Module):
    """The protected input subspace of every block, updated from each finished task's input covariance."""

    def __init__(self, depth: int, dim: int):
        super().__init__()
        self.register_buffer("basis", torch.zeros(depth, dim, dim))   # float32 saved, float64 computed
        self.register_buffer("dims", torch.zeros(depth, dtype=torch.long))
        self.register_buffer("retain", torch.zeros(depth, dtype=torch.bool))

    def _get(self, b: int) -> torch.Tensor:
        return self.basis[b, :, :int(self.dims[b])].to(torch.float64)

    def _set(self, b: int, u: torch.Tensor, retain: bool) -> None:
        self.basis[b].zero_()
        self.basis[b, :, :u.shape[1]] = u.to(self.basis.dtype)
        self.dims[b] = u.shape[1]
        self.retain[b] = retain

    def free_projector(self, b: int) -> torch.Tensor:
        """The projector onto block ``b``'s free space (the identity before any task; zero once the protected
        subspace is the whole space: a ``retain`` basis of no column)."""
        u = self._get(b)
        eye = torch.eye(self.basis.shape[1], dtype=u.dtype, device=u.device)
        if u.shape[1] == 0:
            return torch.zeros_like(eye) if bool(self.retain[b]) else eye
        p = u @ u.T
        return p if bool(self.retain[b]) else eye - p

    def protected_basis(self, b: int) -> torch.Tensor:
        """An orthonormal basis of block ``b``'s protected subspace (D x k)."""
        u = self._get(b)
        if not bool(self.retain[b]):
            return u
        if u.shape[1] == 0:   # everything is protected
            return torch.eye(self.basis.shape[1], dtype=u.dtype, device=u.device)
        full = torch.linalg.svd(u, full_matrices=True)[0]
        return full[:, u.shape[1]:]

    @torch.no_grad()
    def update(self, covs: list[torch.Tensor], thr: float) -> list[dict]:
        """Grow every block's protected subspace with a finished task's input covariance ``covs[b]``."""
        out = []
        for b, c in enumerate(covs):
            c = c.to(device=self.basis.device, dtype=torch.float64)
            u, retain, dim = self._get(b), bool(self.retain[b]), c.shape[0]
            if self.dims[b] == 0:
                U, S, _ = torch.linalg.svd(c, full_matrices=False)
                ratio = S ** 2 / (S ** 2).sum()
                r = int((torch.cumsum(ratio, 0) < thr).sum())
                u, retain = U[:, :max(r, 1)], False
            elif not retain:
                total = _energy(c)
                U, S, _ = torch.linalg.svd(c - u @ (u.T @ c), full_matrices=False)
                ratio, acc, r = S ** 2 / total, float((total - (S ** 2).sum()) / total), 0
                while r < len(ratio) and acc < thr:
                    acc, r = acc + float(ratio[r]), r + 1
                u = torch.cat((u, U[:, :r]), 1)[:, :dim]
            else:
                total = _energy(c)
                U, S, _ = torch.linalg.svd(u @ (u.T @ c), full_matrices=False)
                ratio, acc, r = S ** 2 / total, float((S ** 2).sum() / total), 0
                while r < len(ratio) and acc >= 1 - thr:
                    acc, r = acc - float(ratio[r]), r + 1
                if r:
                    rest = u - U[:, :r] @ (U[:, :r].T @ u)
                    u = torch.linalg.svd(rest, full_matrices=True)[0][:, :u.shape[1] - r]
            if not retain and u.shape[1] > dim / 2:
                # the protected subspace fills more than half the space: keep its complement instead
                u, retain = torch.linalg.svd(u, full_matrices=True)[0][:, u.shape[1]:], True
            self._set(b, u, retain)
            out.append({"protected": dim - u.shape[1] if retain else u.shape[1],
                        "kind": "retain" if retain else "remove"})
        return out


def down_projection(cov: torch.Tensor, free: torch.Tensor, rank: int, scale: float) -> torch.Tensor:
    """InfLoRA's fixed ``A`` of a new task (rank x D): the top-``rank`` left singular vectors of the input
    covariance projected onto the free space, times ``scale`` (the code's 1/sqrt(3)).

    The vectors are projected onto the free space once more: a no-op (up to rounding) while the projected
    covariance has rank >= ``rank``; past that, SVD fills the remaining vectors with arbitrary directions -
    possibly protected ones - which the projection shrinks to (near) zero, so no new update reaches the
    protected subspace (the official code would keep them).
    """
    free = free.to(torch.float64)
    U = torch.linalg.svd(free @ cov.to(torch.float64), full_matrices=False)[0]
    return (U[:, :rank].T @ free) * scale


class InfLoRA(PromptMethod):
    """LoRA on K and V of every block (the family's "pool"), a shared head, DualGPM between tasks. The teacher of
    L_Feat is the previous task's LoRA (as CODA-P's previous pool)."""

    def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
        self.gpm = DualGPM(self.backbone.depth, embed_dim)
        return KVLoRA(self.backbone.depth, embed_dim, self.cfg.rank, num_tasks)

    # ---- forward: no query (the LoRA is the same for every image) --------------------------------
    def query(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_zeros(len(x), 0)

    # (not a frozen feature: the backbone itself changes, so no unprompted pass stands for a query; the previous
    # task's model is frozen for the whole task, so its teacher_feature is, and is cached)

    def features(self, x: torch.Tensor, q: torch.Tensor | None,
                 pool: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return lora_forward(self.backbone, x, pool if pool is not None else self.pool), x.new_zeros(())

    # ---- between tasks: DualGPM ------------------------------------------------------------------
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

        for x, _ in batches(self, data):
            lora_forward(self.backbone, x, self.pool, capture)
        self.train(was_training)
        return [s / max(tokens[0], 1) for s in sums]

    def begin_task(self, task: int, train_set: Any) -> None:
        super().begin_task(task, train_set)   # after the anchors + teacher: the LoRA makes ``task`` current
        # the current B is zero: the covariance is that of the model after the previous task
        for b, c in enumerate(self.input_covariances(train_set)):
            free = self.gpm.free_projector(b).to(c)
            self.pool.set_down(task, b, down_projection(c, free, self.cfg.rank, self.cfg.a_scale))

    def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
        info = super().end_task(task, train_set)
        thr = threshold(task, len(self.pool.B), self.cfg.lamb, self.cfg.lame)   # B: one per task
        info["dualgpm"] = {"threshold": thr, "blocks": self.gpm.update(self.input_covariances(train_set), thr)}
        return info
