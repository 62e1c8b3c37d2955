"""The four InTAct terms, as the paper's equations define them.

* ``intdrift`` (Eq. reg_int_repr): for every protected layer, ``lambda/N * sum_i (lower_i^2 + upper_i^2)``
  where ``[lower, upper]`` bounds ``dW h + db`` over the cumulative hypercube of the layer's input and
  ``(dW, db)`` is measured against the layer after the previous task (Linear, Conv2d per patch,
  BatchNorm as its effective affine update: :func:`~intact.regularizers.interval.layer_drift_bounds`).
* ``feat`` (Eq. prompt_reg_loss): ``lambda/N_B * sum_b w_b ||z_b - z_b^(t-1)||^2`` with the per-sample
  gate ``w_b = 1[z_b^(t-1) in H^(<=t-1)]`` on the teacher (previous prompts) feature.
* ``var`` (Eq. reg_var): ``lambda/N_B * sum_b ||z_b - mean(z)||^2``, from the first task on.
* ``align`` (Eq. inter_task_alignment_loss): ``lambda ||c_t - c_(t-1)||^2 / (r_(t-1) + eps)``; ``c_t`` is
  the centre of the batch's percentile box (the hypercube definition applied to the batch, since
  the task's own box is known only after the task), ``c_(t-1)``, ``r_(t-1)`` come from the cumulative box.

Terms with lambda 0 are not computed (an ablation switches a term off that way). They are put together
per batch by :class:`~intact.regularizers.regularizer.IntactRegularizer`.

The authors' code departs from these equations in places (``docs/protocols.md`` section 4);
each departure is a named switch of :class:`~intact.config.IntactConfig` (``feat_gate``,
``align_form``, ``protected_layers``, ...), off by default, and ``preset: reference`` sets them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from intact.regularizers.hypercube import Hypercube, percentile
from intact.regularizers.interval import layer_drift_bounds

def intdrift_loss(pairs: Sequence[tuple[str, nn.Module, nn.Module]], cubes: Mapping[str, Hypercube],
                  lam: float) -> torch.Tensor:
    """L_IntDrift summed over the protected layers ``(name, layer now, layer after the previous task)``,
    each normalised by its number of outputs (a conv layer's outputs: every channel and position)."""
    total = None
    for name, layer, old in pairs:
        if name not in cubes:
            continue
        lo, hi = layer_drift_bounds(layer, old, cubes[name].lower, cubes[name].upper)
        term = (lo.pow(2) + hi.pow(2)).sum() / lo.numel()
        total = term if total is None else total + term
    if total is None:
        raise ValueError("intdrift: no protected layer has both an anchor and a hypercube")
    return lam * total


def feat_loss(z: torch.Tensor, z_teacher: torch.Tensor, cube: Hypercube,
              lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """L_Feat and the fraction of the batch whose teacher feature lies inside the box."""
    gate = cube.contains(z_teacher).to(z.dtype)
    dist = (z - z_teacher).pow(2).sum(dim=1)
    return lam * (gate * dist).mean(), gate.mean()


def feat_loss_reference(z: torch.Tensor, z_teacher: torch.Tensor, cube: Hypercube,
                        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference code's L_Feat: a gate per (sample, neuron) on the *student* feature, summed squared
    error over gated elements divided by their number. Returns the gated fraction of elements."""
    gate = ((z >= cube.lower) & (z <= cube.upper)).to(z.dtype).detach()
    loss = (gate * (z - z_teacher).pow(2)).sum() / gate.sum().clamp_min(1.0)
    return lam * loss, gate.mean()


def var_loss(h: torch.Tensor, lam: float, norm: str = "sum") -> torch.Tensor:
    """L_Var: mean squared distance of the batch to its centroid, summed over neurons (``sum``: the paper's
    equation) or averaged over them (``mean``: the reference code's per-neuron variance, 1/d of it)."""
    spread = (h - h.mean(dim=0, keepdim=True)).pow(2)
    return lam * (spread.sum(dim=1) if norm == "sum" else spread.mean(dim=1)).mean()


def align_loss(h: torch.Tensor, previous: Hypercube, lam: float, alpha: float, eps: float,
               method: str = "linear") -> torch.Tensor:
    """L_Align between the batch's percentile-box centre (the hypercube's percentiles: ``alpha``, ``method``)
    and the cumulative box of earlier tasks."""
    centre = (percentile(h, alpha, method) + percentile(h, 100.0 - alpha, method)) / 2
    return lam * (centre - previous.center).pow(2).sum() / (previous.radius + eps)


def align_loss_reference(h: torch.Tensor, previous: Hypercube, lam: float, eps: float) -> torch.Tensor:
    """The reference code's L_Align: batch min/max centres; the (non-squared) L2 distance to the box
    centre over the neurons whose batch interval does not overlap the box, divided by the mean radius."""
    lo, hi = h.min(dim=0).values, h.max(dim=0).values
    disjoint = ((hi < previous.lower) | (lo > previous.upper)).to(h.dtype)
    diff = ((lo + hi) / 2 - previous.center) * disjoint
    # sqrt of a zero vector has no gradient: eps inside; no neuron missing the box is 0, as torch.norm gives (the
    # eps alone logged 1e-6 / r)
    value = lam * torch.sqrt(diff.pow(2).sum() + 1e-12) / (previous.radius + eps)
    return torch.where(disjoint.any(), value, torch.zeros_like(value))
