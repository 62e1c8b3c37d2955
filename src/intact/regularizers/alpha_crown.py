"""Optimised-slope (alpha-CROWN-style) bounds of ``new(h) - old(h)``, on two networks that compute it.

:mod:`intact.regularizers.crown` bounds the *difference network* (hidden state ``[a; d]``: the new network's
activations and their drift) with CROWN's fixed lower slopes. Two things make it tighter here:

- **Optimised slopes.** The lower line ``alpha x`` of an unstable (leaky) ReLU is valid for every ``alpha`` in
  ``[s, 1]``, so every choice gives a sound bound; the slopes (one set per bounded output and sign, per hidden
  unit) are optimised by Adam on the bound itself (Xu et al., 2021, "Fast and complete", alpha-CROWN), starting
  from CROWN's choice. Each iteration is a complete, valid bound evaluation with slopes clamped into
  ``[s, 1]``; the result is, per output, the best of those evaluations (iteration 0 is plain CROWN).
- **The pair network** ``[new; old]`` (hidden state ``[a_new; a_old]``, output ``W_L,new a_new - W_L,old
  a_old + db_L``): what a verifier sees on a ``new(x) - old(x)`` wrapper. It relaxes each network's ReLUs
  separately, which is looser than the drift's ``k dx`` lines for small updates and tighter for large ones.
  Both networks are bounded, layer by layer, and their intermediate bounds are intersected (``x_new`` is in
  both; ``x_old = x_new - dx``; ``dx = x_new - x_old``) before the next layer uses them.

Intermediate bounds are CROWN's (not optimised, as in auto_LiRPA's default), rounded outward
(:mod:`intact.regularizers.rounding`) before their lines are built; each result comes with its magnitude.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from intact.regularizers.crown import (
    Box, Layer, Relax, _act_relaxation, _backsubstitute, _bias, _relaxation, difference_network, layer_bounds,
)
from intact.regularizers.rounding import outward

#: Adam on the lower slopes: iterations and learning rate (auto_LiRPA's defaults are 20 and 0.5)
ITERATIONS, LEARNING_RATE = 40, 0.5


def pair_network(new: Sequence[nn.Module], old: Sequence[nn.Module]) -> list[Layer]:
    """``new(h) - old(h)`` as one network on the hidden state ``[a_new; a_old]`` (W, b, slope layers)."""
    layers = difference_network(list(new), list(old))       # validates the head, gives the slopes
    pairs = [(m, o) for m, o in zip(new, old) if isinstance(m, nn.Linear)]
    out: list[Layer] = []
    for k, ((m, o), (_, _, slope)) in enumerate(zip(pairs, layers)):
        if k == 0:
            W, b = torch.cat([m.weight, o.weight]), torch.cat([_bias(m), _bias(o)])
        elif k == len(pairs) - 1:
            W, b = torch.cat([m.weight, -o.weight], dim=1), _bias(m) - _bias(o)
        else:
            W, b = torch.block_diag(m.weight, o.weight), torch.cat([_bias(m), _bias(o)])
        out.append((W, b, slope))
    return out


def _pair_relaxation(lo: torch.Tensor, hi: torch.Tensor, s: float | None, alpha: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    if s is None:
        one, zero = torch.ones_like(lo), torch.zeros_like(lo)
        return one, zero, one, zero
    return _act_relaxation(lo, hi, s, alpha)


def _intersect(diff: Box, pair: Box) -> tuple[Box, Box]:
    """Both networks' bounds of one layer's pre-activations, each tightened by the other's."""
    n = diff[0].numel() // 2
    (xn_lo, xn_hi), (dx_lo, dx_hi) = (diff[0][:n], diff[1][:n]), (diff[0][n:], diff[1][n:])
    (pn_lo, pn_hi), (xo_lo, xo_hi) = (pair[0][:n], pair[1][:n]), (pair[0][n:], pair[1][n:])
    xn_lo, xn_hi = torch.maximum(xn_lo, pn_lo), torch.minimum(xn_hi, pn_hi)
    # (sums of two outward-rounded bounds, rounded outward once more by nextafter)
    inf = torch.tensor(float("inf"), dtype=xn_lo.dtype)
    down, up = (lambda t: torch.nextafter(t, -inf)), (lambda t: torch.nextafter(t, inf))  # noqa: E731
    xo_lo, xo_hi = torch.maximum(xo_lo, down(xn_lo - dx_hi)), torch.minimum(xo_hi, up(xn_hi - dx_lo))
    dx_lo, dx_hi = torch.maximum(dx_lo, down(xn_lo - xo_hi)), torch.minimum(dx_hi, up(xn_hi - xo_lo))
    return (torch.cat([xn_lo, dx_lo]), torch.cat([xn_hi, dx_hi])), (torch.cat([xn_lo, xo_lo]), torch.cat([xn_hi, xo_hi]))


def _optimise(layers: Sequence[Layer], pre: Sequence[Box], lower: torch.Tensor, upper: torch.Tensor, relax: Relax,
              units: int, n_ops: int, iterations: int, lr: float) -> tuple[Box, torch.Tensor]:
    """The output's bounds with optimised lower slopes (``units``: how many leading units of each hidden layer
    are activations with a slope to optimise), rounded outward; and the magnitude of the best evaluation."""
    k = layers[-1][0].shape[0]
    eye = torch.eye(k, dtype=lower.dtype, device=lower.device)
    C = torch.cat([eye, -eye])
    alphas: list[torch.Tensor | None] = []
    for (lo, hi), (_, _, s) in zip(pre, layers[:-1]):
        n = lo.numel() // units
        init = torch.where(hi[:n] >= -lo[:n], torch.ones_like(lo[:n]), torch.full_like(lo[:n], s or 0.0))  # CROWN's
        alphas.append(None if s is None else init.expand(2 * k, n).clone().requires_grad_(True))
    free = [a for a in alphas if a is not None]
    opt = torch.optim.Adam(free, lr=lr) if free else None
    best = torch.full((2 * k,), -float("inf"), dtype=lower.dtype)
    best_mag = torch.zeros_like(best)
    for it in range(iterations + 1 if free else 1):
        value, mag = _backsubstitute(C, layers, pre, lower, upper, relax, alphas)
        with torch.no_grad():
            lo_round = outward((value, value), mag, n_ops)[0]
            better = lo_round > best
            best, best_mag = torch.where(better, lo_round, best), torch.where(better, mag, best_mag)
        if opt is None or it == iterations:
            break
        opt.zero_grad()
        (-value.sum()).backward()
        opt.step()
        with torch.no_grad():
            for a, (_, _, s) in zip(alphas, layers[:-1]):
                if a is not None:
                    a.clamp_(s, 1.0)
    return (best[:k].detach(), -best[k:].detach()), best_mag


def optimised_bounds(new: Sequence[nn.Module], old: Sequence[nn.Module], lower: torch.Tensor, upper: torch.Tensor,
                     n_ops: int, iterations: int = ITERATIONS, lr: float = LEARNING_RATE) -> dict[str, Box]:
    """Outward-rounded bounds of ``new(h) - old(h)`` over the box (a multi-layer head :func:`crown.supports`):
    ``crown`` (the difference network, fixed slopes), ``alpha`` (the better of the optimised difference and
    pair networks, per output), both on the intersected intermediate bounds."""
    diff, pair = difference_network(list(new), list(old)), pair_network(new, old)
    pre_d: list[Box] = []
    pre_p: list[Box] = []
    with torch.no_grad():
        for k in range(len(diff) - 1):
            d, d_mag = layer_bounds(diff[: k + 1], pre_d, lower, upper, _relaxation)
            p, p_mag = layer_bounds(pair[: k + 1], pre_p, lower, upper, _pair_relaxation)
            d, p = _intersect(outward(d, d_mag, n_ops), outward(p, p_mag, n_ops))
            pre_d.append(d)
            pre_p.append(p)
    with torch.enable_grad():
        crown, _ = _optimise(diff, pre_d, lower, upper, _relaxation, 2, n_ops, 0, lr)
        a_d, _ = _optimise(diff, pre_d, lower, upper, _relaxation, 2, n_ops, iterations, lr)
        a_p, _ = _optimise(pair, pre_p, lower, upper, _pair_relaxation, 1, n_ops, iterations, lr)
    alpha = (torch.maximum(a_d[0], a_p[0]), torch.minimum(a_d[1], a_p[1]))
    return {"crown": crown, "alpha": alpha}
