"""The four InTAct terms, as the paper's equations define them.

* ``intdrift`` (Eq. reg_int_repr): for every protected Linear, ``lambda/N * sum_i (lower_i^2 + upper_i^2)``
  where ``[lower, upper]`` bounds ``dW h + db`` over the cumulative hypercube of the layer's input and
  ``(dW, db)`` is measured against the previous task's head.
* ``feat`` (Eq. prompt_reg_loss): ``lambda/N_B * sum_b w_b ||z_b - z_b^(t-1)||^2`` with the per-sample
  gate ``w_b = 1[z_b^(t-1) in H^(<=t-1)]`` on the teacher (previous prompts) feature.
* ``var`` (Eq. reg_var): ``lambda/N_B * sum_b ||z_b - mean(z)||^2``, from the first task on.
* ``align`` (Eq. inter_task_alignment_loss): ``lambda ||c_t - c_(t-1)||^2 / (r_(t-1) + eps)``; ``c_t`` is
  the centre of the batch's percentile box (the hypercube definition applied to the batch, since
  the task's own box is known only after the task), ``c_(t-1)``, ``r_(t-1)`` come from the cumulative box.

Terms with lambda 0 are not computed (an ablation switches a term off that way).

The authors' code departs from these equations in places (``shared/reference/protocols.md`` section 4);
each departure is a named switch of :class:`~intact.config.IntactConfig` (``feat_gate``,
``align_form``, ``protected_layers``, ...), off by default, and ``preset: reference`` sets them all.
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from intact.config import IntactConfig
from intact.regularizers.hypercube import Hypercube, percentile
from intact.regularizers.interval import affine_drift_bounds, network_drift_bounds

#: name of a Linear layer -> its (weight, bias) after the previous task
Anchor = dict[str, tuple[torch.Tensor, torch.Tensor]]


def snapshot_linears(linears: list[tuple[str, nn.Linear]]) -> Anchor:
    """Detached copies of each Linear's parameters: the reference point for the drift."""
    return {n: (m.weight.detach().clone(), m.bias.detach().clone()) for n, m in linears}


def intdrift_loss(linears: list[tuple[str, nn.Linear]], anchor: Anchor, cubes: Mapping[str, Hypercube], lam: float) -> torch.Tensor:
    """L_IntDrift summed over the protected layers (each normalised by its number of outputs)."""
    total = None
    for name, layer in linears:
        if name not in cubes or name not in anchor:
            continue
        W0, b0 = anchor[name]
        lo, hi = affine_drift_bounds(layer.weight - W0, layer.bias - b0, cubes[name].lower, cubes[name].upper)
        term = (lo.pow(2) + hi.pow(2)).sum() / lo.numel()
        total = term if total is None else total + term
    if total is None:
        raise ValueError("intdrift: no protected layer has both an anchor and a hypercube")
    return lam * total


def feat_loss(z: torch.Tensor, z_teacher: torch.Tensor, cube: Hypercube, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """L_Feat and the fraction of the batch whose teacher feature lies inside the box."""
    gate = cube.contains(z_teacher).to(z.dtype)
    dist = (z - z_teacher).pow(2).sum(dim=1)
    return lam * (gate * dist).mean(), gate.mean()


def feat_loss_reference(z: torch.Tensor, z_teacher: torch.Tensor, cube: Hypercube, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference code's L_Feat: a gate per (sample, neuron) on the *student* feature, summed squared
    error over gated elements divided by their number. Returns the gated fraction of elements."""
    gate = ((z >= cube.lower) & (z <= cube.upper)).to(z.dtype).detach()
    loss = (gate * (z - z_teacher).pow(2)).sum() / gate.sum().clamp_min(1.0)
    return lam * loss, gate.mean()


def var_loss(h: torch.Tensor, lam: float) -> torch.Tensor:
    """L_Var: mean squared distance of the batch to its centroid."""
    return lam * (h - h.mean(dim=0, keepdim=True)).pow(2).sum(dim=1).mean()


def align_loss(h: torch.Tensor, previous: Hypercube, lam: float, alpha: float, eps: float) -> torch.Tensor:
    """L_Align between the batch's percentile-box centre and the cumulative box of earlier tasks."""
    centre = (percentile(h, alpha) + percentile(h, 100.0 - alpha)) / 2
    return lam * (centre - previous.center).pow(2).sum() / (previous.radius + eps)


def align_loss_reference(h: torch.Tensor, previous: Hypercube, lam: float, eps: float) -> torch.Tensor:
    """The reference code's L_Align: batch min/max centres; the (non-squared) L2 distance to the box
    centre over the neurons whose batch interval does not overlap the box, divided by the mean radius."""
    lo, hi = h.min(dim=0).values, h.max(dim=0).values
    disjoint = ((hi < previous.lower) | (lo > previous.upper)).to(h.dtype)
    diff = ((lo + hi) / 2 - previous.center) * disjoint
    # sqrt of a zero vector has no gradient: add eps inside, it changes nothing measurable
    return lam * torch.sqrt(diff.pow(2).sum() + 1e-12) / (previous.radius + eps)


def intact_terms(
    cfg: IntactConfig,
    task: int,
    linears: list[tuple[str, nn.Linear]],
    tracked: Mapping[str, torch.Tensor],
    anchor: Anchor | None,
    cubes: Mapping[str, Hypercube],
    z: torch.Tensor,
    z_teacher: torch.Tensor | None,
) -> dict[str, torch.Tensor]:
    """All active InTAct terms for one batch, keyed ``intdrift``, ``feat``, ``var``, ``align``.

    ``tracked`` maps each Linear's name to its batch input (``fc0`` is the [CLS] feature ``z``).
    ``var`` and ``align`` act on every tracked layer; ``feat`` on the [CLS] feature.
    Also returns ``feat_gate`` (a diagnostic, not a loss).
    """
    out: dict[str, torch.Tensor] = {}
    if cfg.protected_layers == "cls":  # the reference code tracks only the [CLS] input of the head
        tracked = {k: v for k, v in tracked.items() if k == "fc0"}
        linears = [(n, m) for n, m in linears if n == "fc0"]
    if cfg.lambda_var > 0:
        out["var"] = sum(var_loss(h, cfg.lambda_var) for h in tracked.values())
    if task == 0:
        return out
    if cfg.lambda_intdrift > 0 and anchor is not None:
        out["intdrift"] = intdrift_loss(linears, anchor, cubes, cfg.lambda_intdrift)
    if cfg.lambda_feat > 0 and z_teacher is not None:
        feat = feat_loss_reference if cfg.feat_gate == "student_element" else feat_loss
        out["feat"], gate = feat(z, z_teacher, cubes["fc0"], cfg.lambda_feat)
        out["feat_gate"] = gate.detach()
    if cfg.lambda_align > 0:
        out["align"] = sum(
            align_loss_reference(h, cubes[name], cfg.lambda_align, cfg.align_eps) if cfg.align_form == "reference"
            else align_loss(h, cubes[name], cfg.lambda_align, cfg.percentile, cfg.align_eps)
            for name, h in tracked.items() if name in cubes
        )
    return out


@torch.no_grad()
def head_drift_certificate(linears: list[tuple[str, nn.Linear]], anchor: Anchor, cube: Hypercube, negative_slope: float) -> dict[str, object]:
    """The guarantee, measured: a sound bound of ``|f_t(z) - f_(t-1)(z)|`` over every ``z`` in ``cube``.

    ``certificate`` = max over outputs of max(|lower|, |upper|). For a single Linear head the bound
    is exact (attained at a corner of the box); for deeper heads it is a sound upper bound.
    """
    new = [(m.weight, m.bias) for _, m in linears]
    old = [anchor[n] for n, _ in linears]
    lo, hi = network_drift_bounds(new, old, cube.lower, cube.upper, negative_slope)
    return {
        "certificate": float(torch.maximum(lo.abs(), hi.abs()).max()),
        "drift_lower": lo.tolist(),
        "drift_upper": hi.tolist(),
    }
