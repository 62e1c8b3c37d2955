"""The certificate of a protected chain: a bound of ``|f_t(z) - f_(t-1)(z)|`` over a box, sound in floating point.

The bounds (docs/certificate.md): the interval bound (:func:`~intact.regularizers.interval.sequential_drift_bounds`,
any supported chain); for a multi-layer Linear-(leaky) ReLU head also CROWN on the difference network and
the optimised-slope bound (:mod:`intact.regularizers.alpha_crown`). All are computed in float64 on eval-mode
copies, rounded outward (:mod:`intact.regularizers.rounding`), and intersected per output; the result is
widened once more by the rounding of the model's own forward passes in its dtype, so that no drift the model
computes at a point of the box exceeds it.
"""

from __future__ import annotations

import copy
from typing import Any
from collections.abc import Sequence

import torch
from torch import nn

from intact.regularizers import crown
from intact.regularizers.alpha_crown import DECAY, ITERATIONS, optimised_bounds
from intact.regularizers.interval import sequential_drift_bounds
from intact.regularizers.rounding import forward_magnitudes, operations, outward


def eval_copy(modules: Sequence[nn.Module]) -> nn.Sequential:
    """A detached eval-mode copy (running statistics, no dropout): the live modules' state is never touched."""
    return copy.deepcopy(nn.Sequential(*modules)).eval().requires_grad_(False)


def width(lo: torch.Tensor, hi: torch.Tensor) -> float:
    """The certificate of drift bounds: max over outputs of max(|lower|, |upper|)."""
    return float(torch.maximum(lo.abs(), hi.abs()).max())


def drift_certificate(new: Sequence[nn.Module], old: Sequence[nn.Module], lower: torch.Tensor,
                      upper: torch.Tensor, iterations: int = ITERATIONS, decay: float = DECAY) -> dict[str, Any]:
    """Sound float bounds of ``new(z) - old(z)`` over the box: ``lower`` / ``upper`` (per output, float64) and the
    ``widths`` of each bound before intersection (``interval``, and ``crown`` / ``alpha`` for multi-layer heads;
    ``iterations`` and ``decay``: the slope optimisation's,
    :func:`~intact.regularizers.alpha_crown.optimised_bounds`)."""
    new_e, old_e = eval_copy(new), eval_copy(old)
    dtype = next(new_e.parameters()).dtype
    new64, old64 = list(copy.deepcopy(new_e).double()), list(copy.deepcopy(old_e).double())
    lower, upper = lower.double(), upper.double()
    n = operations(new64)
    drift_mag, model_mag = forward_magnitudes(new64, old64, lower, upper)
    lo, hi = outward(sequential_drift_bounds(new64, old64, lower, upper), drift_mag, n)
    widths = {"interval": width(lo, hi)}
    if crown.supports(new64) and sum(isinstance(m, nn.Linear) for m in new64) > 1:
        for name, (b_lo, b_hi) in optimised_bounds(new64, old64, lower, upper, n, iterations, decay=decay).items():
            widths[name] = width(b_lo, b_hi)
            lo, hi = torch.maximum(lo, b_lo), torch.minimum(hi, b_hi)
    # the model evaluates f_new and f_old in its own dtype: their rounding, bounded by its forward magnitude
    lo, hi = outward((lo, hi), model_mag, n, dtype=dtype)
    return {"lower": lo, "upper": hi, "widths": widths, "new": new_e, "old": old_e}
