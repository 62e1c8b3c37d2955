"""Interval arithmetic for affine layers (Appendix "Interval Arithmetic" / "Detailed Derivation").

Boxes are (lower, upper) tensors. For ``y = W h + b`` with ``h`` in ``[l, u]`` the tightest box is
``[W+ l - W- u + b, W+ u - W- l + b]`` with ``W+ = max(W, 0)``, ``W- = max(-W, 0)``; applied to the
*update* ``(dW, db)`` it bounds the output drift ``dW h + db`` over the whole box.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

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


def conv2d_bounds(W: torch.Tensor, b: torch.Tensor | None, lower: torch.Tensor, upper: torch.Tensor,
                  **conv: Any) -> Box:
    """Exact per-output bounds of ``conv2d(h, W) + b`` over a per-element box ``(C, H, W)`` or ``(N, C, H, W)``.

    Each output position is an affine map of its patch, so the affine rule applies patch-wise: the
    convolutions of ``W+`` / ``W-`` with the box's lower / upper maps. Zero padding is exact (padded
    inputs are the constant 0, inside every box). ``conv``: stride, padding, dilation, groups.
    """
    batched = lower.dim() == 4
    lower, upper = (lower, upper) if batched else (lower[None], upper[None])
    wp, wn = W.clamp_min(0), (-W).clamp_min(0)
    lo = F.conv2d(lower, wp, None, **conv) - F.conv2d(upper, wn, None, **conv)
    hi = F.conv2d(upper, wp, None, **conv) - F.conv2d(lower, wn, None, **conv)
    if b is not None:
        lo, hi = lo + b.view(-1, 1, 1), hi + b.view(-1, 1, 1)
    return (lo, hi) if batched else (lo[0], hi[0])


def conv2d_drift_bounds(dW: torch.Tensor, db: torch.Tensor | None, lower: torch.Tensor, upper: torch.Tensor,
                        **conv: Any) -> Box:
    """Drift bounds of an updated Conv2d over a per-element input box (Appendix, convolutional layers)."""
    return conv2d_bounds(dW, db, lower, upper, **conv)


def batchnorm_affine(bn: nn.modules.batchnorm._BatchNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode BatchNorm as a per-channel affine map ``W_eff h + b_eff`` (Appendix, BatchNorm)."""
    inv = torch.rsqrt(bn.running_var + bn.eps)
    gamma = bn.weight if bn.weight is not None else torch.ones_like(inv)
    beta = bn.bias if bn.bias is not None else torch.zeros_like(inv)
    return gamma * inv, beta - gamma * bn.running_mean * inv


def channelwise_bounds(w: torch.Tensor, b: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """Exact bounds of ``w_c h + b_c`` (one scale per channel, dim 0 of an unbatched box) over the box."""
    shape = (-1,) + (1,) * (lower.dim() - 1)
    wp, wn, b = w.clamp_min(0).view(shape), (-w).clamp_min(0).view(shape), b.view(shape)
    return wp * lower - wn * upper + b, wp * upper - wn * lower + b


# ---- layers as modules: the drift bound of one protected layer, and of a whole Sequential --------------

AFFINE = (nn.Linear, nn.Conv2d, nn.BatchNorm1d, nn.BatchNorm2d)


def _conv_args(m: nn.Conv2d) -> dict[str, Any]:
    if m.padding_mode != "zeros" or isinstance(m.padding, str):
        raise ValueError(f"{m}: only numeric zero padding has exact interval bounds here")
    return {"stride": m.stride, "padding": m.padding, "dilation": m.dilation, "groups": m.groups}


def _delta(new: torch.Tensor | None, old: torch.Tensor | None) -> torch.Tensor | None:
    return None if new is None else new - old


def layer_bounds(m: nn.Module, lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """Exact bounds of an affine layer's output over an unbatched input box (BatchNorm in eval form)."""
    if isinstance(m, nn.Linear):
        return affine_bounds(m.weight, m.bias, lower, upper)
    if isinstance(m, nn.Conv2d):
        return conv2d_bounds(m.weight, m.bias, lower, upper, **_conv_args(m))
    if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        return channelwise_bounds(*batchnorm_affine(m), lower, upper)
    raise TypeError(f"no interval bound for {type(m).__name__}")


def layer_drift_bounds(new: nn.Module, old: nn.Module, lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """Bounds of ``new(h) - old(h)`` over ``h`` in an unbatched box, for one affine layer (exact).

    Linear: ``dW h + db``; Conv2d: the same per patch (convolutions of ``dW+`` / ``dW-``); BatchNorm:
    the difference of the two eval-mode effective affine maps - with unchanged running statistics this
    is the appendix's ``(dgamma / sigma, dbeta - dgamma mu / sigma)``, and it stays exact when they move.
    """
    if isinstance(new, nn.Linear):
        return affine_drift_bounds(new.weight - old.weight, _delta(new.bias, old.bias), lower, upper)
    if isinstance(new, nn.Conv2d):
        return conv2d_drift_bounds(new.weight - old.weight, _delta(new.bias, old.bias), lower, upper, **_conv_args(new))
    if isinstance(new, (nn.BatchNorm1d, nn.BatchNorm2d)):
        (wn, bn), (wo, bo) = batchnorm_affine(new), batchnorm_affine(old)
        return channelwise_bounds(wn - wo, bn - bo, lower, upper)
    raise TypeError(f"no drift bound for {type(new).__name__}")


def _linear_part_bounds(m: nn.Module, lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """Bounds of the layer's linear part (no bias) over a box: how it maps a box of input *drifts*."""
    if isinstance(m, nn.Linear):
        return interval_matmul(m.weight, lower, upper)
    if isinstance(m, nn.Conv2d):
        return conv2d_bounds(m.weight, None, lower, upper, **_conv_args(m))
    w, _ = batchnorm_affine(m)
    return channelwise_bounds(w, torch.zeros_like(w), lower, upper)


def activation_slope(m: nn.Module) -> float | None:
    """The negative slope of a (leaky) ReLU, None for any other module; a negative slope is refused: every rule
    here needs a monotone activation."""
    if isinstance(m, nn.ReLU):
        return 0.0
    if not isinstance(m, nn.LeakyReLU):
        return None
    if m.negative_slope < 0:
        raise ValueError(f"LeakyReLU(negative_slope={m.negative_slope}) is not monotone: no interval rule bounds it")
    return m.negative_slope


@torch.no_grad()
def sequential_drift_bounds(new: Sequence[nn.Module], old: Sequence[nn.Module], lower: torch.Tensor,
                            upper: torch.Tensor) -> Box:
    """Sound bounds of ``f_new(z) - f_old(z)`` over ``z`` in an unbatched box, for a stack of layers.

    Layers: Linear / Conv2d / BatchNorm (eval form), ReLU / LeakyReLU, Flatten, Identity / Dropout (eval).
    Per affine layer the output drift is ``(new - old)(h_new) + old_linear(h_new - h_old)``: the first part
    exactly over the interval of ``h_new`` (propagated through the new network), the second by interval
    arithmetic over the incoming drift. A (leaky) ReLU of slope ``s >= 0`` is monotone with slopes ``s`` and 1, so
    the drift ``d`` becomes ``k d`` with ``k`` between ``s`` and 1. For one affine layer the bound is exact.
    """
    h_lo, h_hi = lower, upper
    d: Box | None = None
    for m, o in zip(new, old):
        slope = activation_slope(m)
        if isinstance(m, AFFINE):
            t_lo, t_hi = layer_drift_bounds(m, o, h_lo, h_hi)
            if d is not None:
                s_lo, s_hi = _linear_part_bounds(o, *d)
                t_lo, t_hi = t_lo + s_lo, t_hi + s_hi
            d = (t_lo, t_hi)
            h_lo, h_hi = layer_bounds(m, h_lo, h_hi)
        elif slope is not None:
            if d is not None:
                d = (torch.minimum(d[0], slope * d[0]), torch.maximum(d[1], slope * d[1]))
            h_lo, h_hi = leaky_relu_bounds(h_lo, h_hi, slope)
        elif isinstance(m, nn.Flatten):
            h_lo, h_hi = h_lo.flatten(), h_hi.flatten()
            d = None if d is None else (d[0].flatten(), d[1].flatten())
        elif not isinstance(m, (nn.Identity, nn.Dropout)):
            raise TypeError(f"sequential_drift_bounds: no rule for {type(m).__name__}")
    if d is None:
        raise ValueError("sequential_drift_bounds needs at least one affine layer")
    return d
