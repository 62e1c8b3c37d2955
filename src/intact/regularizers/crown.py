"""A tighter certificate for multi-layer heads: CROWN-style linear bounds on the difference network.

The interval certificate (:func:`~intact.regularizers.interval.sequential_drift_bounds`) propagates plain
boxes through the new network and the drift; for a Linear-LeakyReLU-Linear head with a large update it is
sound but loose, because it forgets that ``new(h)`` and ``old(h)`` see the *same* input ``h``. Here both
networks run side by side as one network on ``h`` -

    g(h) = new(h) - old(h):   first layer [W1_new; W1_old] h + [b1_new; b1_old], then block-diagonal
    layers diag(Wk_new, Wk_old), and the last layer [WL_new, -WL_old] with bias bL_new - bL_old -

and CROWN (Zhang et al., 2018) bounds ``g`` over the box: each (leaky) ReLU with an unstable pre-activation
``x`` in ``[l, u]`` is enclosed by two lines (upper: the chord through ``(l, s l)`` and ``(u, u)``; lower:
``a x`` with ``a`` in ``[s, 1]``, chosen as CROWN does), and the output is back-substituted to a linear
function of ``h`` whose exact minimum / maximum over the box is the bound. Intermediate pre-activation
bounds come from the same back-substitution, layer by layer. Every step encloses the true function, so the
bound is sound (``tests/test_crown.py`` checks it against sampled and gradient-ascent drift); for one affine
layer ``g`` is affine and the bound is exact. Supported: Linear, ReLU / LeakyReLU, Identity / Dropout (eval).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

Box = tuple[torch.Tensor, torch.Tensor]
#: (weight, bias, slope of the activation after it or None) per affine layer of the stacked network
Layer = tuple[torch.Tensor, torch.Tensor, float | None]


def _slope(m: nn.Module) -> float | None:
    return 0.0 if isinstance(m, nn.ReLU) else m.negative_slope if isinstance(m, nn.LeakyReLU) else None


def _bias(m: nn.Linear) -> torch.Tensor:
    return m.bias if m.bias is not None else torch.zeros(m.out_features, dtype=m.weight.dtype, device=m.weight.device)


def supports(layers: Sequence[nn.Module]) -> bool:
    """Whether ``layers`` is a head this module bounds: Linear layers with (leaky) ReLUs between them."""
    kept = [m for m in layers if not isinstance(m, (nn.Identity, nn.Dropout))]
    return (bool(kept) and isinstance(kept[0], nn.Linear) and isinstance(kept[-1], nn.Linear)
            and all(isinstance(m, (nn.Linear, nn.ReLU, nn.LeakyReLU)) for m in kept)
            and not any(_slope(a) is not None and _slope(b) is not None for a, b in zip(kept, kept[1:])))


def difference_network(new: Sequence[nn.Module], old: Sequence[nn.Module]) -> list[Layer]:
    """The stacked network computing ``new(h) - old(h)`` as (W, b, slope) layers (see the module text)."""
    pairs = [(m, o) for m, o in zip(new, old) if not isinstance(m, (nn.Identity, nn.Dropout))]
    affine: list[tuple[nn.Linear, nn.Linear, float | None]] = []
    for m, o in pairs:
        if isinstance(m, nn.Linear):
            affine.append((m, o, None))
        elif affine and affine[-1][2] is None:
            affine[-1] = (*affine[-1][:2], _slope(m))
        else:
            raise ValueError(f"difference_network: two activations in a row or one before any Linear ({type(m).__name__})")
    if affine[-1][2] is not None:
        raise ValueError("difference_network: the head must end with a Linear layer")
    if len(affine) == 1:
        m, o, _ = affine[0]
        return [(m.weight - o.weight, _bias(m) - _bias(o), None)]
    out: list[Layer] = []
    for k, (m, o, slope) in enumerate(affine):
        if k == 0:
            W = torch.cat([m.weight, o.weight])
            b = torch.cat([_bias(m), _bias(o)])
        elif k == len(affine) - 1:
            W = torch.cat([m.weight, -o.weight], dim=1)
            b = _bias(m) - _bias(o)
        else:
            W = torch.block_diag(m.weight, o.weight)
            b = torch.cat([_bias(m), _bias(o)])
        out.append((W, b, slope))
    return out


def _relaxation(lo: torch.Tensor, hi: torch.Tensor, s: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Linear bounds ``a_l x + c_l <= act(x) <= a_u x + c_u`` of LeakyReLU(slope s) for ``x`` in ``[lo, hi]``
    (``s`` None: no activation, the identity)."""
    one, zero = torch.ones_like(lo), torch.zeros_like(lo)
    if s is None:
        return one, zero, one, zero
    s_ = torch.full_like(lo, s)
    active, dead = lo >= 0, hi <= 0
    unstable = ~(active | dead)
    width = (hi - lo).clamp_min(1e-30)
    chord = (hi - s * lo) / width                                  # the line through (lo, s lo) and (hi, hi)
    a_u = torch.where(active, one, torch.where(dead, s_, chord))
    c_u = torch.where(unstable, s * lo - chord * lo, zero)
    # lower: a x with a in [s, 1] (LeakyReLU is convex and through 0): CROWN's choice, 1 where hi >= -lo
    a_l = torch.where(active, one, torch.where(dead, s_, torch.where(hi >= -lo, one, s_)))
    return a_l, zero, a_u, c_u


def _backsubstitute(C: torch.Tensor, layers: Sequence[Layer], pre: Sequence[Box], lower: torch.Tensor,
                    upper: torch.Tensor) -> torch.Tensor:
    """The CROWN lower bound of ``C @ y_K`` over the input box, ``y_K`` the pre-activation of ``layers[-1]``
    (``pre[k]``: bounds of layer k's pre-activation, for the activations between)."""
    W, b, _ = layers[-1]
    lam, const = C @ W, C @ b
    for k in range(len(layers) - 2, -1, -1):
        a_l, c_l, a_u, c_u = _relaxation(*pre[k], layers[k][2])
        pos, neg = lam.clamp_min(0), lam.clamp_max(0)
        # a positive coefficient takes the activation's lower line, a negative one its upper line
        const = const + pos @ c_l + neg @ c_u
        lam = pos * a_l + neg * a_u
        W, b, _ = layers[k]
        const = const + lam @ b
        lam = lam @ W
    return const + lam.clamp_min(0) @ lower + lam.clamp_max(0) @ upper


@torch.no_grad()
def crown_bounds(layers: Sequence[Layer], lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """Lower and upper bounds of the stacked network's output over the box ``[lower, upper]`` (1-d)."""
    pre: list[Box] = []
    for k in range(len(layers)):
        n = layers[k][0].shape[0]
        eye = torch.eye(n, dtype=lower.dtype, device=lower.device)
        lo = _backsubstitute(eye, layers[: k + 1], pre, lower, upper)
        hi = -_backsubstitute(-eye, layers[: k + 1], pre, lower, upper)
        pre.append((lo, hi))
    return pre[-1]


@torch.no_grad()
def difference_bounds(new: Sequence[nn.Module], old: Sequence[nn.Module], lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """Sound bounds of ``new(h) - old(h)`` for ``h`` in the unbatched box (a head :func:`supports` accepts)."""
    layers = difference_network(list(new), list(old))
    lower, upper = lower.to(layers[0][0].dtype), upper.to(layers[0][0].dtype)
    return crown_bounds(layers, lower, upper)
