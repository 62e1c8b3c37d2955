"""Outward rounding: turn a bound computed in floating point into a bound of the real-valued quantity.

Every bound here (interval, CROWN, optimised slopes) is a sum of products of the weights, the box and the
relaxation lines' coefficients. In floating point with unit roundoff ``u`` (``2^-53`` in float64), a value
obtained through at most ``N`` roundings of sums and products satisfies the classical bound (Higham,
*Accuracy and Stability of Numerical Algorithms*, 2nd ed., Lemma 3.1 and Sec. 3.1 - 3.5, for inner products
and products of matrices in any summation order, fused multiply-adds included)

    |fl(q) - q| <= gamma_N * S,   gamma_N = N u / (1 - N u),

with ``S`` the same sums evaluated on the absolute values of every term (the *magnitude*; each bound
routine returns it next to its value). So ``q - gamma_N S`` is a lower bound of the exact ``q``; one
``nextafter`` step towards -inf afterwards covers the rounding of that subtraction, and ``(1 + 4u)`` on the
margin the rounding of ``gamma_N S`` itself. Underflow adds at most ``2^-1074`` per operation (``N`` of them,
absolute). ``N`` is counted generously: twice the summed fan-ins and widths of the layers, plus 8 per layer
(the relaxation's products, the intercepts' additions, the rsqrt of BatchNorm) and 16.

The relaxation lines are chords built from intermediate bounds; those bounds are rounded outward the same
way before their lines are built, so the true pre-activation lies in the box the lines were made for, and
the line's own coefficient rounding (a few ``u`` relative) is inside ``gamma_N S`` (``S`` includes every
``|slope * x|`` and ``|intercept|``). Finally the certificate bounds the drift *as the model evaluates it* in
its own dtype too: ``f_new`` and ``f_old`` each differ from their exact values by at most ``gamma_N`` (in
the model's dtype) times their forward magnitude (:func:`forward_magnitudes`), which is added.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from intact.regularizers.interval import _conv_args, activation_slope, batchnorm_affine

Box = tuple[torch.Tensor, torch.Tensor]


def gamma(n: int, dtype: torch.dtype) -> float:
    """``n u / (1 - n u)`` for the unit roundoff ``u`` of ``dtype`` (refused where ``n u >= 1/2``)."""
    u = torch.finfo(dtype).eps / 2
    if n * u >= 0.5:
        raise ValueError(f"rounding: {n} operations in {dtype} leave no usable error bound")
    return n * u / (1 - n * u)


def operations(modules: Sequence[nn.Module]) -> int:
    """A generous count ``N`` of the roundings any bounded quantity of the chain ``modules`` goes through."""
    n = 16
    for m in modules:
        if isinstance(m, nn.Linear):
            n += 2 * (m.in_features + m.out_features) + 8
        elif isinstance(m, nn.Conv2d):
            n += 2 * (m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1] + m.out_channels) + 8
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            n += 16
    return n


def outward(bounds: Box, magnitude: torch.Tensor, n: int, dtype: torch.dtype | None = None) -> Box:
    """``bounds`` (computed in their dtype, a float type) widened by the rounding error of ``n`` operations in
    ``dtype`` (default: theirs) on terms of total ``magnitude``: sound for the exact values."""
    lo, hi = bounds
    dtype = dtype or lo.dtype
    u = torch.finfo(lo.dtype).eps / 2
    tiny = n * torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps  # n subnormal steps, absolute
    margin = gamma(n, dtype) * (1 + 4 * u) * magnitude.detach() + tiny
    return down(lo - margin), up(hi + margin)


def down(t: torch.Tensor) -> torch.Tensor:
    """The next float below ``t`` (its value exactly: ``t + (next - t)`` adds one ulp, exact), with ``t``'s gradient."""
    d = t.detach()
    return t + (torch.nextafter(d, torch.full_like(d, -float("inf"))) - d)


def up(t: torch.Tensor) -> torch.Tensor:
    """The next float above ``t``, with ``t``'s gradient (see :func:`down`)."""
    d = t.detach()
    return t + (torch.nextafter(d, torch.full_like(d, float("inf"))) - d)


def _abs_affine(m: nn.Module, v: torch.Tensor) -> torch.Tensor:
    """The magnitude of ``m``'s output terms for inputs of magnitude ``v >= 0``: ``|W| v + |b|`` (BatchNorm:
    its eval form, with ``|beta| + |gamma mu / sigma|`` for the bias's two terms)."""
    if isinstance(m, nn.Linear):
        return F.linear(v, m.weight.abs(), None if m.bias is None else m.bias.abs())
    if isinstance(m, nn.Conv2d):
        return F.conv2d(v[None], m.weight.abs(), None if m.bias is None else m.bias.abs(), **_conv_args(m))[0]
    w, _ = batchnorm_affine(m)
    beta = m.bias.abs() if m.bias is not None else torch.zeros_like(w)
    b = beta + (w * m.running_mean).abs()
    shape = (-1,) + (1,) * (v.dim() - 1)
    return w.abs().view(shape) * v + b.view(shape)


@torch.no_grad()
def forward_magnitudes(new: Sequence[nn.Module], old: Sequence[nn.Module], lower: torch.Tensor,
                       upper: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Magnitudes of the interval drift bound's terms (``D``) and of the two networks' outputs (``|f_new| + |f_old|``
    terms) over the box: ``m_k = A_k m_(k-1)``, ``D_k = A_new m + A_old m + A_old D`` with ``A`` the absolute
    affine maps (``|dW h| <= |W_new h| + |W_old h|`` term-wise). An activation of slope ``s`` scales both by
    ``max(1, s)`` (it changes nothing for slopes in [0, 1])."""
    m_new = m_old = torch.maximum(lower.abs(), upper.abs())
    d: torch.Tensor | None = None
    for m, o in zip(new, old):
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.modules.batchnorm._BatchNorm)):
            step = _abs_affine(m, m_new) + _abs_affine(o, m_new)
            d = step if d is None else step + _abs_affine(o, d)
            m_new, m_old = _abs_affine(m, m_new), _abs_affine(o, m_old)
        elif isinstance(m, nn.Flatten):
            m_new, m_old, d = m_new.flatten(), m_old.flatten(), None if d is None else d.flatten()
        elif (k := max(1.0, activation_slope(m) or 0.0)) > 1:
            m_new, m_old, d = k * m_new, k * m_old, None if d is None else k * d
    if d is None:
        raise ValueError("forward_magnitudes needs at least one affine layer")
    return d, m_new + m_old
