"""Interval bounds equal brute force over the box's corners (they are exact for affine maps)."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from torch import nn

from intact.regularizers.interval import (
    affine_bounds, affine_drift_bounds, conv2d_drift_bounds, layer_drift_bounds, sequential_drift_bounds,
)


def network_drift_bounds(new, old, lower, upper, slope):
    """The Linear / LeakyReLU stacks of ``new`` / ``old`` parameter lists through sequential_drift_bounds."""
    def stack(params):
        layers = []
        for k, (W, b) in enumerate(params):
            lin = nn.Linear(W.shape[1], W.shape[0]).double()
            lin.weight.data.copy_(W)
            lin.bias.data.copy_(b)
            layers += [lin] + ([nn.LeakyReLU(slope)] if k < len(params) - 1 else [])
        return layers
    return sequential_drift_bounds(stack(new), stack(old), lower, upper)


def corners(lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    d = lower.numel()
    mask = torch.tensor(list(itertools.product([0.0, 1.0], repeat=d)))
    return lower + mask * (upper - lower)


def random_box(d: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = torch.randn(d, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64)
    return torch.minimum(a, b), torch.maximum(a, b)


@pytest.mark.parametrize("seed", range(20))
def test_affine_drift_bounds_equal_corner_extremes(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out = 1 + seed % 7, 1 + seed % 5
    lo_in, hi_in = random_box(d_in, g)
    dW = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    db = torch.randn(d_out, generator=g, dtype=torch.float64)
    lo, hi = affine_drift_bounds(dW, db, lo_in, hi_in)
    drift = corners(lo_in, hi_in) @ dW.T + db
    torch.testing.assert_close(lo, drift.min(0).values)
    torch.testing.assert_close(hi, drift.max(0).values)
    # and no interior point escapes the bounds
    inner = lo_in + torch.rand(500, d_in, generator=g, dtype=torch.float64) * (hi_in - lo_in)
    vals = inner @ dW.T + db
    assert (vals >= lo - 1e-12).all() and (vals <= hi + 1e-12).all()


def test_affine_bounds_degenerate_box_is_a_point():
    W = torch.randn(3, 4, dtype=torch.float64)
    b = torch.randn(3, dtype=torch.float64)
    x = torch.randn(4, dtype=torch.float64)
    lo, hi = affine_bounds(W, b, x, x)
    torch.testing.assert_close(lo, W @ x + b)
    torch.testing.assert_close(hi, W @ x + b)


@pytest.mark.parametrize("seed", range(10))
def test_network_drift_bounds_single_layer_exact_and_deep_sound(seed):
    g = torch.Generator().manual_seed(seed)
    lo_in, hi_in = random_box(4, g)
    dims = [4, 6, 5, 3]
    old = [(torch.randn(dims[i + 1], dims[i], generator=g, dtype=torch.float64),
            torch.randn(dims[i + 1], generator=g, dtype=torch.float64)) for i in range(3)]
    new = [(W + 0.3 * torch.randn(W.shape, generator=g, dtype=torch.float64),
            b + 0.3 * torch.randn(b.shape, generator=g, dtype=torch.float64)) for W, b in old]
    # one layer: exact
    lo1, hi1 = network_drift_bounds(new[:1], old[:1], lo_in, hi_in, 0.01)
    e_lo, e_hi = affine_drift_bounds(new[0][0] - old[0][0], new[0][1] - old[0][1], lo_in, hi_in)
    torch.testing.assert_close(lo1, e_lo)
    torch.testing.assert_close(hi1, e_hi)

    # three layers with LeakyReLU: every sampled drift lies inside the bound
    def f(params, z):
        for k, (W, b) in enumerate(params):
            z = z @ W.T + b
            if k < len(params) - 1:
                z = F.leaky_relu(z, 0.01)
        return z

    lo, hi = network_drift_bounds(new, old, lo_in, hi_in, 0.01)
    z = torch.cat([corners(lo_in, hi_in),
                   lo_in + torch.rand(4000, 4, generator=g, dtype=torch.float64) * (hi_in - lo_in)])
    drift = f(new, z) - f(old, z)
    assert (drift >= lo - 1e-9).all() and (drift <= hi + 1e-9).all()
    # unchanged network: zero drift bound
    zl, zh = network_drift_bounds(old, old, lo_in, hi_in, 0.01)
    assert float(zl.abs().max()) == 0.0 and float(zh.abs().max()) == 0.0


def test_conv2d_drift_bounds_equal_corner_extremes():
    g = torch.Generator().manual_seed(0)
    lo_in = torch.randn(1, 1, 3, 3, generator=g, dtype=torch.float64)
    hi_in = lo_in + torch.rand(1, 1, 3, 3, generator=g, dtype=torch.float64)
    dW = torch.randn(2, 1, 2, 2, generator=g, dtype=torch.float64)
    db = torch.randn(2, generator=g, dtype=torch.float64)
    lo, hi = conv2d_drift_bounds(dW, db, lo_in, hi_in)
    pts = corners(lo_in.flatten(), hi_in.flatten()).view(-1, 1, 3, 3)
    out = F.conv2d(pts, dW, db)
    torch.testing.assert_close(lo[0], out.min(0).values)
    torch.testing.assert_close(hi[0], out.max(0).values)


def test_batchnorm_drift_is_the_appendix_effective_affine_update():
    """Unchanged running statistics: the drift is (dgamma / sigma) h + (dbeta - dgamma mu / sigma)."""
    g = torch.Generator().manual_seed(1)
    old = nn.BatchNorm1d(4).eval()
    with torch.no_grad():
        old.running_mean.copy_(torch.randn(4, generator=g))
        old.running_var.copy_(torch.rand(4, generator=g) + 0.5)
        old.weight.copy_(torch.randn(4, generator=g))
    new = nn.BatchNorm1d(4).eval()
    new.load_state_dict(old.state_dict())
    with torch.no_grad():
        new.weight.add_(torch.randn(4, generator=g))
        new.bias.add_(torch.randn(4, generator=g))
    sigma = torch.sqrt(old.running_var + old.eps)
    dW = (new.weight - old.weight) / sigma
    db = (new.bias - old.bias) - (new.weight - old.weight) * old.running_mean / sigma
    for x in torch.randn(10, 4, generator=g):   # a point is a degenerate box: the bound is the drift itself
        lo, hi = layer_drift_bounds(new, old, x, x)
        torch.testing.assert_close(lo, x * dW + db, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(hi, lo)
        torch.testing.assert_close(new(x[None])[0] - old(x[None])[0], x * dW + db, rtol=1e-5, atol=1e-5)
