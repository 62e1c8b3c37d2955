"""A tighter certificate for multi-layer heads: CROWN-style linear bounds on the difference network.

The interval certificate (:func:`~intact.regularizers.interval.sequential_drift_bounds`) propagates plain
boxes through the new network and the drift; for a Linear-LeakyReLU-Linear head with a large update it is
sound but loose: the drift of a hidden layer is an interval, not a function of the input ``h``. Here the
difference is tracked *symbolically*. With ``a`` the new network's activations, ``x = W a + b`` its
pre-activations and ``dx = x_new - x_old``, ``d = act(x_new) - act(x_old)`` the activation drift -

    dx_k = dW_k a_(k-1) + W_k,old d_(k-1) + db_k,     d_0 = 0, a_0 = h,   and the output drift is dx_L -

so ``g(h) = new(h) - old(h)`` is one feed-forward network on ``h`` whose hidden state is ``[a_k; d_k]``:
first layer ``[W1_new; dW1] h + [b1_new; db1]``, then ``[[Wk_new, 0], [dWk, Wk_old]]``, last ``[dWL, WL_old]``.
CROWN (Zhang et al., 2018) bounds it over the box: each ``a = act(x)`` with an unstable ``x`` in ``[l, u]``
lies between two lines (upper: the chord through ``(l, s l)`` and ``(u, u)``; lower: ``c x``, ``c`` in
``[s, 1]``, chosen as CROWN does); each ``d = k dx`` with ``k`` in ``[s, 1]`` (a monotone activation with
slopes in ``[s, 1]``) lies between ``min(dx, s dx)`` and ``max(dx, s dx)``, relaxed by their chords over
the bounds of ``dx``, and is exact (``dx`` or ``s dx``) where ``x_new`` and ``x_old`` are both stably on one
side. The output is back-substituted to a linear function of ``h`` whose exact minimum / maximum over the box
is the bound; intermediate bounds come from the same back-substitution, layer by layer. Every step encloses
the true function, so the bound is sound (``tests/test_crown.py`` checks it against sampled and
gradient-ascent drift); for one affine layer ``g`` is affine and the bound is exact. Supported: Linear,
ReLU / LeakyReLU, Identity / Dropout (eval). The certificate uses the intersection with the interval bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from intact.regularizers.interval import activation_slope

Box = tuple[torch.Tensor, torch.Tensor]
#: (weight, bias, slope of the activation after it or None) per affine layer of the stacked network
Layer = tuple[torch.Tensor, torch.Tensor, float | None]
#: the lines of a hidden layer: (lower bounds, upper bounds, slope, lower slopes or None) -> (a_l, c_l, a_u, c_u)
Relax = Callable[[torch.Tensor, torch.Tensor, float | None, torch.Tensor | None], tuple[torch.Tensor, ...]]


def _bias(m: nn.Linear) -> torch.Tensor:
    return m.bias if m.bias is not None else torch.zeros(m.out_features, dtype=m.weight.dtype, device=m.weight.device)


def supports(layers: Sequence[nn.Module]) -> bool:
    """Whether ``layers`` is a head this module bounds: Linear layers with (leaky) ReLUs of slope in [0, 1] between
    them (the relaxations take the activation as convex; a slope above 1 makes it concave)."""
    kept = [m for m in layers if not isinstance(m, (nn.Identity, nn.Dropout))]
    return (bool(kept) and isinstance(kept[0], nn.Linear) and isinstance(kept[-1], nn.Linear)
            and all(isinstance(m, (nn.Linear, nn.ReLU, nn.LeakyReLU)) for m in kept)
            and all(activation_slope(m) <= 1 for m in kept if not isinstance(m, nn.Linear))
            and not any(activation_slope(a) is not None and activation_slope(b) is not None
                        for a, b in zip(kept, kept[1:])))


def difference_network(new: Sequence[nn.Module], old: Sequence[nn.Module]) -> list[Layer]:
    """The network computing ``new(h) - old(h)`` on the hidden state ``[a; d]``, as (W, b, slope) layers
    (see the module text)."""
    pairs = [(m, o) for m, o in zip(new, old) if not isinstance(m, (nn.Identity, nn.Dropout))]
    affine: list[tuple[nn.Linear, nn.Linear, float | None]] = []
    for m, o in pairs:
        if isinstance(m, nn.Linear):
            affine.append((m, o, None))
        elif affine and affine[-1][2] is None:
            affine[-1] = (*affine[-1][:2], activation_slope(m))
        else:
            raise ValueError("difference_network: two activations in a row or one before any Linear "
                             f"({type(m).__name__})")
    if affine[-1][2] is not None:
        raise ValueError("difference_network: the head must end with a Linear layer")
    if len(affine) == 1:
        m, o, _ = affine[0]
        return [(m.weight - o.weight, _bias(m) - _bias(o), None)]
    out: list[Layer] = []
    for k, (m, o, slope) in enumerate(affine):
        dW, db = m.weight - o.weight, _bias(m) - _bias(o)
        if k == 0:                                   # h -> [x_new; dx]
            W, b = torch.cat([m.weight, dW]), torch.cat([_bias(m), db])
        elif k == len(affine) - 1:                   # [a; d] -> dx_L: the output drift
            W, b = torch.cat([dW, o.weight], dim=1), db
        else:                                        # [a; d] -> [x_new; dx]
            zero = torch.zeros(m.out_features, o.in_features, dtype=dW.dtype, device=dW.device)
            W = torch.cat([torch.cat([m.weight, zero], dim=1), torch.cat([dW, o.weight], dim=1)])
            b = torch.cat([_bias(m), db])
        out.append((W, b, slope))
    return out


def _act_relaxation(lo: torch.Tensor, hi: torch.Tensor, s: float,
                    alpha: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """Lines ``a_l x + c_l <= act(x) <= a_u x + c_u`` of LeakyReLU(slope s) for ``x`` in ``[lo, hi]``.

    ``alpha`` (optional, broadcastable to ``lo``, e.g. one row per bounded output): the lower slopes of the
    unstable units, clamped to ``[s, 1]`` - every such line lies below the activation (alpha-CROWN)."""
    one, zero, s_ = torch.ones_like(lo), torch.zeros_like(lo), torch.full_like(lo, s)
    active, dead = lo >= 0, hi <= 0
    unstable = ~(active | dead)
    chord = (hi - s * lo) / (hi - lo).clamp_min(1e-30)             # the line through (lo, s lo) and (hi, hi)
    a_u = torch.where(active, one, torch.where(dead, s_, chord))
    c_u = torch.where(unstable, s * lo - chord * lo, zero)
    # lower: c x with c in [s, 1] (LeakyReLU is convex and through 0): CROWN's choice, 1 where hi >= -lo
    # alpha: clamped in value, but the gradient passes at the ends too (torch's clamp stops it at s and 1,
    # where CROWN's choice starts the optimisation)
    lower = torch.where(hi >= -lo, one, s_) if alpha is None else alpha + (alpha.clamp(s, 1.0) - alpha).detach()
    a_l = torch.where(active, one, torch.where(dead, s_, lower))
    return a_l, zero, a_u, c_u


def _drift_relaxation(p: torch.Tensor, q: torch.Tensor, x_lo: torch.Tensor, x_hi: torch.Tensor,
                      s: float) -> tuple[torch.Tensor, ...]:
    """Lines bounding ``d = act(x_new) - act(x_old) = k dx`` (k in [s, 1]) for ``dx`` in ``[p, q]``, with
    ``x_new`` in ``[x_lo, x_hi]`` (so ``x_old = x_new - dx`` in ``[x_lo - q, x_hi - p]``)."""
    one, zero, s_ = torch.ones_like(p), torch.zeros_like(p), torch.full_like(p, s)
    pos, neg = p >= 0, q <= 0
    straddle = ~(pos | neg)
    width = (q - p).clamp_min(1e-30)
    up = (q - s * p) / width                                       # max(dx, s dx) <= chord (p, s p) - (q, q)
    down = (s * q - p) / width                                     # min(dx, s dx) >= chord (p, p) - (q, s q)
    a_u = torch.where(pos, one, torch.where(neg, s_, up))
    c_u = torch.where(straddle, s * p - up * p, zero)
    a_l = torch.where(pos, s_, torch.where(neg, one, down))
    c_l = torch.where(straddle, p - down * p, zero)
    # both pre-activations stably on one side: d = dx (active) or s dx (dead), exactly
    active = (x_lo >= 0) & (x_lo - q >= 0)
    dead = (x_hi <= 0) & (x_hi - p <= 0)
    exact = torch.where(active, one, s_)
    both = active | dead
    return (torch.where(both, exact, a_l), torch.where(both, zero, c_l),
            torch.where(both, exact, a_u), torch.where(both, zero, c_u))


def _relaxation(lo: torch.Tensor, hi: torch.Tensor, s: float | None,
                alpha: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """Lines bounding the hidden state ``[a; d]`` of a layer with pre-activation ``[x_new; dx]`` in ``[lo, hi]``
    (``s`` None: no activation between two Linear layers, the identity, exact). ``alpha``: the lower slopes
    of the unstable ``a`` units (rows x n/2), see :func:`_act_relaxation`."""
    if s is None:
        one, zero = torch.ones_like(lo), torch.zeros_like(lo)
        return one, zero, one, zero
    n = lo.numel() // 2
    act = _act_relaxation(lo[:n], hi[:n], s, alpha)
    drift = _drift_relaxation(lo[n:], hi[n:], lo[:n], hi[:n], s)
    if alpha is not None:
        drift = (drift[0].expand(alpha.shape[0], -1), *drift[1:])
    return tuple(torch.cat([a, d], dim=-1) for a, d in zip(act, drift))


def _backsubstitute(C: torch.Tensor, layers: Sequence[Layer], pre: Sequence[Box], lower: torch.Tensor,
                    upper: torch.Tensor, relax: Relax = _relaxation,
                    alphas: Sequence[torch.Tensor | None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The CROWN lower bound of ``C @ y_K`` over the input box, ``y_K`` the pre-activation of ``layers[-1]``
    (``pre[k]``: bounds of layer k's pre-activation, for the activations between; ``relax``: their lines,
    ``alphas[k]``: optional lower slopes), and its *magnitude*: the same sums with every term replaced by its
    absolute value, an upper bound of the sum of |terms| each accumulation adds (the rounding error scale,
    :mod:`intact.regularizers.rounding`)."""
    W, b, _ = layers[-1]
    lam, const = C @ W, C @ b
    lam_abs, mag = C.abs() @ W.abs(), C.abs() @ b.abs()
    for k in range(len(layers) - 2, -1, -1):
        a_l, c_l, a_u, c_u = relax(*pre[k], layers[k][2], None if alphas is None else alphas[k])
        pos, neg = lam.clamp_min(0), lam.clamp_max(0)
        # a positive coefficient takes the activation's lower line, a negative one its upper line
        const = const + pos @ c_l + neg @ c_u
        lam = pos * a_l + neg * a_u
        mag = mag + lam_abs @ torch.maximum(c_l.abs(), c_u.abs())
        lam_abs = lam_abs * torch.maximum(a_l.abs(), a_u.abs())
        W, b, _ = layers[k]
        const = const + lam @ b
        lam = lam @ W
        mag = mag + lam_abs @ b.abs()
        lam_abs = lam_abs @ W.abs()
    value = const + lam.clamp_min(0) @ lower + lam.clamp_max(0) @ upper
    return value, mag + lam_abs @ torch.maximum(lower.abs(), upper.abs())


@torch.no_grad()
def crown_bounds(layers: Sequence[Layer], lower: torch.Tensor, upper: torch.Tensor) -> Box:
    """Lower and upper bounds of a :func:`difference_network`'s output over the box ``[lower, upper]`` (1-d)."""
    pre: list[Box] = []
    for k in range(len(layers)):
        pre.append(layer_bounds(layers[: k + 1], pre, lower, upper)[0])
    return pre[-1]


def layer_bounds(layers: Sequence[Layer], pre: Sequence[Box], lower: torch.Tensor, upper: torch.Tensor,
                 relax: Relax = _relaxation) -> tuple[Box, torch.Tensor]:
    """CROWN bounds of ``layers[-1]``'s pre-activation (``pre``: those of the layers before) and their
    magnitude (the larger of the two, per unit)."""
    n = layers[-1][0].shape[0]
    eye = torch.eye(n, dtype=lower.dtype, device=lower.device)
    (lo, m_lo), (neg_hi, m_hi) = (_backsubstitute(c, layers, pre, lower, upper, relax) for c in (eye, -eye))
    return (lo, -neg_hi), torch.maximum(m_lo, m_hi)


@torch.no_grad()
def difference_bounds(new: Sequence[nn.Module], old: Sequence[nn.Module], lower: torch.Tensor,
                      upper: torch.Tensor) -> Box:
    """Sound bounds of ``new(h) - old(h)`` for ``h`` in the unbatched box (a head :func:`supports` accepts)."""
    layers = difference_network(list(new), list(old))
    lower, upper = lower.to(layers[0][0].dtype), upper.to(layers[0][0].dtype)
    return crown_bounds(layers, lower, upper)
