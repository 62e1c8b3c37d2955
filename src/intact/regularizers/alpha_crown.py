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

Every layer's bounds (the intermediate ones too) have their own slopes, all optimised together on the sum of
the output's bound widths of both networks, the intermediate bounds recomputed at every iteration; every bound
is rounded outward (:mod:`intact.regularizers.rounding`) before the next layer's lines are built from it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from intact.regularizers.crown import (
    Box, Layer, Relax, _act_relaxation, _backsubstitute, _bias, _relaxation, difference_network,
)
from intact.regularizers.rounding import down, outward, up

#: Adam on the lower slopes: iterations, learning rate and its decay per iteration (auto_LiRPA's defaults are
#: 20, 0.5 and 0.98); docs/certificate.md compares them with auto_LiRPA's alpha-CROWN at 20 and 200 iterations
ITERATIONS, LEARNING_RATE, DECAY = 40, 0.5, 1.0


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


def _pair_relaxation(lo: torch.Tensor, hi: torch.Tensor, s: float | None,
                     alpha: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
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
    # (differences of two outward-rounded bounds, rounded outward once more: one ulp covers one subtraction)
    xo_lo, xo_hi = torch.maximum(xo_lo, down(xn_lo - dx_hi)), torch.minimum(xo_hi, up(xn_hi - dx_lo))
    dx_lo, dx_hi = torch.maximum(dx_lo, down(xn_lo - xo_hi)), torch.minimum(dx_hi, up(xn_hi - xo_lo))
    return (torch.cat([xn_lo, dx_lo]), torch.cat([xn_hi, dx_hi])), (torch.cat([xn_lo, xo_lo]),
                                                                    torch.cat([xn_hi, xo_hi]))


def _spec(rows: int, like: torch.Tensor) -> torch.Tensor:
    eye = torch.eye(rows, dtype=like.dtype, device=like.device)
    return torch.cat([eye, -eye])


def _bound(layers: Sequence[Layer], pre: Sequence[Box], lower: torch.Tensor, upper: torch.Tensor, relax: Relax,
           alphas: Sequence[torch.Tensor | None] | None, n_ops: int) -> Box:
    """Outward-rounded CROWN bounds of ``layers[-1]``'s pre-activation with the given lower slopes."""
    rows = layers[-1][0].shape[0]
    value, mag = _backsubstitute(_spec(rows, lower), layers, pre, lower, upper, relax, alphas)
    lo = outward((value, value), mag, n_ops)[0]
    return lo[:rows], -lo[rows:]


class _Slopes:
    """The lower slopes of one network: per bounded layer (start node) and per relaxed layer before it, one row
    per bound (lower and upper of every unit), starting from CROWN's choice once the box of the layer is known."""

    def __init__(self, layers: Sequence[Layer], units: int):
        self.layers, self.units = layers, units
        self.alphas: dict[int, list[torch.Tensor | None]] = {}

    def get(self, k: int, pre: Sequence[Box]) -> list[torch.Tensor | None]:
        if k not in self.alphas:
            rows = 2 * self.layers[k][0].shape[0]
            out: list[torch.Tensor | None] = []
            for (lo, hi), (_, _, s) in zip(pre, self.layers[:k]):
                n = lo.numel() // self.units
                init = torch.where(hi[:n] >= -lo[:n], torch.ones_like(lo[:n]), torch.full_like(lo[:n], s or 0.0))
                out.append(None if s is None else init.detach().expand(rows, n).clone().requires_grad_(True))
            self.alphas[k] = out
        return self.alphas[k]

    def project(self) -> None:
        with torch.no_grad():
            for k, alphas in self.alphas.items():
                for a, (_, _, s) in zip(alphas, self.layers[:k]):
                    if a is not None:
                        a.clamp_(s, 1.0)


def _pass(diff: Sequence[Layer], pair: Sequence[Layer], lower: torch.Tensor, upper: torch.Tensor, n_ops: int,
          slopes: tuple[_Slopes, _Slopes]) -> tuple[Box, Box]:
    """One complete evaluation: both networks' intermediate bounds layer by layer (intersected), then the output's."""
    pre_d: list[Box] = []
    pre_p: list[Box] = []
    last = len(diff) - 1
    for k in range(last):
        d = _bound(diff[: k + 1], pre_d, lower, upper, _relaxation, slopes[0].get(k, pre_d), n_ops)
        p = _bound(pair[: k + 1], pre_p, lower, upper, _pair_relaxation, slopes[1].get(k, pre_p), n_ops)
        d, p = _intersect(d, p)
        pre_d.append(d)
        pre_p.append(p)
    return (_bound(diff, pre_d, lower, upper, _relaxation, slopes[0].get(last, pre_d), n_ops),
            _bound(pair, pre_p, lower, upper, _pair_relaxation, slopes[1].get(last, pre_p), n_ops))


def optimised_bounds(new: Sequence[nn.Module], old: Sequence[nn.Module], lower: torch.Tensor, upper: torch.Tensor,
                     n_ops: int, iterations: int = ITERATIONS, lr: float = LEARNING_RATE,
                     decay: float = DECAY) -> dict[str, Box]:
    """Outward-rounded bounds of ``new(h) - old(h)`` over the box (a multi-layer head :func:`crown.supports`):
    ``crown`` (the difference network with CROWN's slopes, on the intersected intermediate bounds) and
    ``alpha`` (per output, the best over the iterations of the tighter of the two networks, with the slopes of
    every layer's bounds optimised together: Adam on the sum of the output's bounds, its learning rate
    multiplied by ``decay`` after every step). Every iteration is a complete bound evaluation with slopes in
    ``[s, 1]``, so each is sound and so is their per-output best."""
    diff, pair = difference_network(list(new), list(old)), pair_network(new, old)
    slopes = (_Slopes(diff, 2), _Slopes(pair, 1))
    best_lo = best_hi = crown = None
    opt = None
    with torch.enable_grad():
        for it in range(iterations + 1):
            (d_lo, d_hi), (p_lo, p_hi) = _pass(diff, pair, lower, upper, n_ops, slopes)
            lo, hi = torch.maximum(d_lo, p_lo).detach(), torch.minimum(d_hi, p_hi).detach()
            if crown is None:
                crown = (d_lo.detach(), d_hi.detach())
                best_lo, best_hi = lo, hi
            best_lo, best_hi = torch.maximum(best_lo, lo), torch.minimum(best_hi, hi)
            if it == iterations:
                break
            if opt is None:
                params = [a for s in slopes for alphas in s.alphas.values() for a in alphas if a is not None]
                if not params:
                    break
                opt = torch.optim.Adam(params, lr=lr)
            opt.zero_grad()
            (d_hi - d_lo + p_hi - p_lo).sum().backward()
            opt.step()
            for group in opt.param_groups:
                group["lr"] *= decay
            for s in slopes:
                s.project()
    return {"crown": crown, "alpha": (best_lo, best_hi)}
