"""Interval arithmetic for affine layers (Appendix "Interval Arithmetic" / "Detailed Derivation").

Boxes are (lower, upper) tensors. For ``y = W h + b`` with ``h`` in ``[l, u]`` the tightest box is
``[W+ l - W- u + b, W+ u - W- l + b]`` with ``W+ = max(W, 0)``, ``W- = max(-W, 0)``; applied to the
*update* ``(dW, db)`` it bounds the output drift ``dW h + db`` over the whole box.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

Box = tuple[torch.Tensor, torch.Tensor]


def affine_bounds(W: torch.Tensor, b: torch.Tensor | None, lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """Exact per-output bounds of ``W h + b`` over ``h in [lower, upper]`` (batched boxes allowed)."""
    wp, wn = W.clamp_min(0), (-W).clamp_min(0)
    lo = lower @ wp.T - upper @ wn.T
    hi = upper @ wp.T - lower @ wn.T
    if b is not None:
        lo, hi = lo + b, hi + b
    return lo, hi


def affine_drift_bounds(dW: torch.Tensor, db: torch.Tensor | None, lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """Bounds of the drift ``dW h + db`` of an updated affine layer over the hypercube (the paper's Eq.)."""
    return affine_bounds(dW, db, lower, upper)


def interval_matmul(W: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """``W [lower, upper]`` without bias."""
    return affine_bounds(W, None, lower, upper)


def leaky_relu_bounds(lower: torch.Tensor, upper: torch.Tensor, negative_slope: float) -> Box:
    """LeakyReLU is monotone, so the box maps endpoint-wise."""
    return F.leaky_relu(lower, negative_slope), F.leaky_relu(upper, negative_slope)


def network_drift_bounds(
    new: Sequence[tuple[torch.Tensor, torch.Tensor]],
    old: Sequence[tuple[torch.Tensor, torch.Tensor]],
    lower: torch.Tensor,
    upper: torch.Tensor,
    negative_slope: float,
) -> Box:
    """Sound bounds of ``f_new(z) - f_old(z)`` over ``z in [lower, upper]`` for Linear/LeakyReLU stacks.

    Per layer the pre-activation drift is ``dW h_new + W_old (h_new - h_old) + db``; ``h_new`` is
    bounded by ordinary interval propagation through the new network, and the activation drift by
    ``k (a_new - a_old)`` with slope ``k in [negative_slope, 1]`` (LeakyReLU is monotone and
    1-Lipschitz). For one Linear layer this is the exact bound of :func:`affine_drift_bounds`.
    """
    h_lo, h_hi = lower, upper
    d_lo, d_hi = torch.zeros_like(lower), torch.zeros_like(upper)
    for k, ((Wn, bn), (Wo, bo)) in enumerate(zip(new, old)):
        t_lo, t_hi = affine_drift_bounds(Wn - Wo, bn - bo, h_lo, h_hi)
        if k > 0:
            s_lo, s_hi = interval_matmul(Wo, d_lo, d_hi)
            t_lo, t_hi = t_lo + s_lo, t_hi + s_hi
        if k == len(new) - 1:
            return t_lo, t_hi
        d_lo = torch.minimum(t_lo, negative_slope * t_lo)
        d_hi = torch.maximum(t_hi, negative_slope * t_hi)
        h_lo, h_hi = leaky_relu_bounds(*affine_bounds(Wn, bn, h_lo, h_hi), negative_slope)
    raise ValueError("network_drift_bounds needs at least one layer")


def conv2d_drift_bounds(
    dW: torch.Tensor, db: torch.Tensor | None, lower: torch.Tensor, upper: torch.Tensor, stride: int = 1, padding: int = 0
) -> Box:
    """Drift bounds of an updated Conv2d over an input box ``(N, C, H, W)`` (Appendix, convolutional layers)."""
    wp, wn = dW.clamp_min(0), (-dW).clamp_min(0)
    lo = F.conv2d(lower, wp, None, stride, padding) - F.conv2d(upper, wn, None, stride, padding)
    hi = F.conv2d(upper, wp, None, stride, padding) - F.conv2d(lower, wn, None, stride, padding)
    if db is not None:
        lo, hi = lo + db.view(1, -1, 1, 1), hi + db.view(1, -1, 1, 1)
    return lo, hi


def batchnorm_effective_update(
    gamma_new: torch.Tensor, beta_new: torch.Tensor, gamma_old: torch.Tensor, beta_old: torch.Tensor,
    running_mean: torch.Tensor, running_var: torch.Tensor, eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode BatchNorm's update as a per-channel affine drift ``(dW_eff, db_eff)`` (Appendix)."""
    inv = torch.rsqrt(running_var + eps)
    dgamma, dbeta = gamma_new - gamma_old, beta_new - beta_old
    return dgamma * inv, dbeta - dgamma * running_mean * inv
