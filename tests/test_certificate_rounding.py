"""The certificate is an upper bound in floating point too (intact.regularizers.rounding): on tiny heads whose
bound is attained exactly (one Linear layer: at a corner; single-neuron hidden layers; zero-width box
coordinates), no drift the model computes at a sample, a corner or an attack's point exceeds it, in float64
and in float32, while the unrounded bound is exceeded."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from intact.experiments.certificate_width import ascent_drift, updated
from intact.regularizers.certificate import drift_certificate
from intact.regularizers.interval import sequential_drift_bounds


def _head(dims: list[int], g: torch.Generator, dtype: torch.dtype) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        lin = nn.Linear(dims[i], dims[i + 1]).to(torch.float64)
        with torch.no_grad():                                   # weights over many magnitudes
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=g, dtype=torch.float64)
                             * 10.0 ** torch.randint(-3, 4, lin.weight.shape, generator=g))
            lin.bias.copy_(torch.randn(lin.bias.shape, generator=g, dtype=torch.float64) * 10)
        layers.append(lin)
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).to(dtype)


def _box(d: int, g: torch.Generator, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    centre = torch.randn(d, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-2, 3, (d,), generator=g)
    radius = torch.rand(d, generator=g, dtype=torch.float64) * (torch.rand(d, generator=g) < 0.6)  # some zero-width
    return (centre - radius).to(dtype), (centre + radius).to(dtype)


@torch.no_grad()
def _points(lo: torch.Tensor, hi: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    d = lo.numel()
    corners = torch.tensor(list(itertools.product([0.0, 1.0], repeat=d)), dtype=lo.dtype)
    uniform = torch.rand((256, d), generator=g, dtype=torch.float64).to(lo.dtype)
    return torch.cat([lo + (hi - lo) * corners, lo + (hi - lo) * uniform])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_no_computed_drift_exceeds_the_rounded_certificate_on_exactly_attained_bounds(dtype):
    g = torch.Generator().manual_seed(0)
    raw_exceeded = 0
    for trial in range(90):
        d = int(torch.randint(1, 6, (1,), generator=g))
        dims = [d, 1] if trial % 3 == 0 else [d, 1, 1] if trial % 3 == 1 else [d, 2, 1, 1]
        old = _head(dims, g, dtype)
        new = updated(old, float(10.0 ** torch.randint(-3, 1, (1,), generator=g)), trial)
        lo, hi = _box(d, g, dtype)
        cert = drift_certificate(list(new), list(old), lo, hi)
        z = _points(lo, hi, g)
        with torch.no_grad():
            drift = (new(z) - old(z)).double()
        if len(dims) > 2 and trial % 10 == 0:       # gradient ascent on the deeper ones (float64 attack)
            a_lo, a_hi = ascent_drift(new.double(), old.double(), lo.double(), hi.double(), steps=30, restarts=2)
            drift = torch.cat([drift, a_lo[None], a_hi[None]])
        assert (drift >= cert["lower"]).all() and (drift <= cert["upper"]).all(), (trial, dims, drift, cert)
        if len(dims) == 2:                           # one layer: the raw bound is exact, so rounding decides
            r_lo, r_hi = sequential_drift_bounds(list(new), list(old), lo, hi)
            raw_exceeded += int((drift < r_lo.double()).any() or (drift > r_hi.double()).any())
    assert raw_exceeded > 0, "the fuzz never found the unrounded bound exceeded: it would not catch a missing margin"


def test_the_margin_is_negligible_next_to_the_bound():
    g = torch.Generator().manual_seed(1)
    old = _head([8, 16, 4], g, torch.float64)
    new = updated(old, 0.1, 3)
    lo, hi = _box(8, g, torch.float64)
    cert = drift_certificate(list(new), list(old), lo, hi)
    r_lo, r_hi = sequential_drift_bounds(list(new), list(old), lo, hi)
    assert (cert["upper"] <= r_hi + 1e-9 * r_hi.abs().max()).all()
    assert (cert["lower"] >= r_lo - 1e-9 * r_lo.abs().max()).all()
