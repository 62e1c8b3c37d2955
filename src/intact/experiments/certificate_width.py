"""How tight the head's certificate is: the interval and the CROWN bound of ``new(h) - old(h)`` over a box,
next to the worst drift that sampling and projected gradient ascent find (a lower bound of the true worst).

Random Linear-(Leaky)ReLU heads, updated by a relative step (``relative`` times each parameter's norm in a
random direction), on random boxes. ``tools/certificate_width.py`` prints :func:`measure` as a table;
``tests/test_crown.py`` uses the same heads, updates and ascent for its soundness property tests.
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any

import torch
from torch import nn

from intact.regularizers.certificate import drift_certificate
from intact.regularizers.crown import difference_bounds
from intact.regularizers.interval import sequential_drift_bounds

#: the 48 comparison cases of docs/certificate.md (issue 24): ReLU heads x relative updates x 3 seeds
HEADS_ALPHA = ([32, 64, 10], [64, 128, 10], [32, 64, 64, 10], [64, 128, 128, 10])
RELATIVES = (0.01, 0.1, 0.3, 1.0)
SEEDS = (0, 1, 2)
#: the slope optimisation at auto_LiRPA's well-optimised setting (200 iterations, its learning-rate decay 0.98)
LONG = {"iterations": 200, "decay": 0.98}


def case(dims: list[int], relative: float, seed: int) -> tuple[nn.Sequential, nn.Sequential,
                                                               tuple[torch.Tensor, torch.Tensor]]:
    """The old head (ReLU), its update and the box of one comparison case (the same for every verifier)."""
    old = head(dims, 0.0, seed)
    return old, updated(old, relative, seed + 10), box(dims[0], seed + 20)


def head(dims: list[int], slope: float, seed: int) -> nn.Sequential:
    """Linear layers of widths ``dims`` with LeakyReLU(``slope``) (ReLU for 0) between them, in float64."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(nn.LeakyReLU(slope) if slope > 0 else nn.ReLU())
    return nn.Sequential(*layers).double()


def updated(old: nn.Sequential, relative: float, seed: int) -> nn.Sequential:
    """A copy of ``old`` with every parameter moved by ``relative`` times its norm in a random direction."""
    new = copy.deepcopy(old)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            d = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.add_(relative * p.norm() / d.norm() * d)
    return new


def box(dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random box: centres N(0, 1), radii in [0.2, 1.2]."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.randn(dim, generator=g, dtype=torch.float64)
    radius = 0.2 + torch.rand(dim, generator=g, dtype=torch.float64)
    return centre - radius, centre + radius


def ascent_drift(new: nn.Module, old: nn.Module, lo: torch.Tensor, hi: torch.Tensor, steps: int = 150,
                 restarts: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Per output, the smallest and largest drift found by projected sign-gradient ascent from random starts."""
    k = new[-1].out_features
    found_lo = torch.full((k,), float("inf"), dtype=torch.float64)
    found_hi = torch.full((k,), -float("inf"), dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    for sign in (1.0, -1.0):
        z = (lo + (hi - lo) * torch.rand((restarts, k, lo.numel()), generator=g,
                                         dtype=torch.float64)).requires_grad_(True)
        step = (hi - lo) / 20
        for _ in range(steps):
            obj = sign * torch.diagonal(new(z) - old(z), dim1=1, dim2=2).sum()  # row j of z pushes output j
            (grad,) = torch.autograd.grad(obj, z)
            with torch.no_grad():
                z += step * grad.sign()
                z.copy_(torch.maximum(torch.minimum(z, hi), lo))
        with torch.no_grad():
            d = torch.diagonal(new(z) - old(z), dim1=1, dim2=2)
            found_lo, found_hi = torch.minimum(found_lo, d.min(0).values), torch.maximum(found_hi, d.max(0).values)
    return found_lo, found_hi


def width(bounds: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The certificate of per-output bounds: max over outputs of max(|lower|, |upper|)."""
    return float(torch.maximum(bounds[0].abs(), bounds[1].abs()).max())


@torch.no_grad()
def _sampled(new: nn.Module, old: nn.Module, lo: torch.Tensor, hi: torch.Tensor, n: int, seed: int) -> float:
    g = torch.Generator().manual_seed(seed)
    z = lo + (hi - lo) * torch.rand((n, lo.numel()), generator=g, dtype=torch.float64)
    return float((new(z) - old(z)).abs().max())


def measure(dims: list[int], slope: float = 0.01, relative: float = 0.3, seed: int = 0) -> dict[str, Any]:
    """The interval and CROWN certificates and the sampled / gradient-ascent worst drift of one random head."""
    old = head(dims, slope, seed)
    new = updated(old, relative, seed + 10)
    lo, hi = box(dims[0], seed + 20)
    interval = width(sequential_drift_bounds(list(new), list(old), lo, hi))
    crown = width(difference_bounds(list(new), list(old), lo, hi))
    a_lo, a_hi = ascent_drift(new, old, lo, hi)
    ascent = float(torch.maximum(a_lo.abs(), a_hi.abs()).max())
    return {"dims": dims, "slope": slope, "relative": relative, "seed": seed, "interval": interval, "crown": crown,
            "ascent": ascent, "sampled": _sampled(new, old, lo, hi, 20000, seed),
            "interval_over_crown": interval / crown, "crown_over_ascent": crown / ascent,
            "interval_over_ascent": interval / ascent}


@torch.no_grad()
def attack(new: nn.Module, old: nn.Module, lo: torch.Tensor, hi: torch.Tensor, restarts: int = 64, steps: int = 300,
           samples: int = 20000, corners: int = 5000, seed: int = 0) -> float:
    """The largest |drift| found by PGD (:func:`ascent_drift`), uniform samples and random corners of the box:
    a lower bound of the true worst drift."""
    with torch.enable_grad():
        a_lo, a_hi = ascent_drift(new, old, lo, hi, steps=steps, restarts=restarts)
    g = torch.Generator().manual_seed(seed)
    z = torch.cat([lo + (hi - lo) * torch.rand((samples, lo.numel()), generator=g, dtype=torch.float64),
                   lo + (hi - lo) * torch.randint(0, 2, (corners, lo.numel()), generator=g).double()])
    found = (new(z) - old(z)).abs().max()
    return float(torch.maximum(found, torch.maximum(a_lo.abs(), a_hi.abs()).max()))


def compare(dims: list[int], relative: float, seed: int, restarts: int = 64, steps: int = 300,
            long: bool = False) -> dict[str, Any]:
    """One comparison case: the certificate (and each bound's width, outward-rounded), its process CPU seconds
    and the load average while it ran (``os.getloadavg``, 1 minute), the attack; with ``long`` also the
    certificate with the slopes optimised as :data:`LONG` says (``certificate_long``, ``alpha_long``,
    ``cpu_seconds_long``)."""
    old, new, (lo, hi) = case(dims, relative, seed)
    row: dict[str, Any] = {"dims": dims, "relative": relative, "seed": seed}
    for suffix, schedule in [("", {}), *([("_long", LONG)] if long else [])]:
        start = time.process_time()
        cert = drift_certificate(list(new), list(old), lo, hi, **schedule)
        row[f"cpu_seconds{suffix}"] = time.process_time() - start
        row[f"alpha{suffix}"] = cert["widths"]["alpha"]
        row[f"certificate{suffix}"] = width((cert["lower"], cert["upper"]))
        if not suffix:
            row.update(cert["widths"])
    row["load"] = os.getloadavg()[0]
    row["attack"] = attack(new, old, lo, hi, restarts, steps, seed=seed)
    return row
