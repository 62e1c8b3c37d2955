"""DualGPM: the per-block input subspace of earlier tasks that InfLoRA keeps its new updates out of.

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

import torch
from torch import nn


def threshold(task: int, num_tasks: int, lamb: float, lame: float) -> float:
    """The energy threshold after ``task`` (0-based): ``lamb`` at the first task, rising linearly towards ``lame``."""
    return (lame - lamb) * task / num_tasks + lamb


def _energy(c: torch.Tensor) -> torch.Tensor:
    return (torch.linalg.svdvals(c) ** 2).sum()


class DualGPM(nn.Module):
    """The protected input subspace of every block, updated from each finished task's input covariance."""

    def __init__(self, depth: int, dim: int):
        super().__init__()
        self.register_buffer("basis", torch.zeros(depth, dim, dim))   # float32 stored, float64 computed
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
        """The projector onto block ``b``'s free space (the identity before any task)."""
        u = self._get(b)
        eye = torch.eye(self.basis.shape[1], dtype=u.dtype, device=u.device)
        if u.shape[1] == 0:
            return eye
        p = u @ u.T
        return p if bool(self.retain[b]) else eye - p

    def protected_basis(self, b: int) -> torch.Tensor:
        """An orthonormal basis of block ``b``'s protected subspace (D x k)."""
        u = self._get(b)
        if not bool(self.retain[b]) or u.shape[1] == 0:
            return u
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
            out.append({"protected": dim - u.shape[1] if retain else u.shape[1], "kind": "retain" if retain else "remove"})
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
