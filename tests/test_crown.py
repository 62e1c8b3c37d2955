"""The CROWN certificate of multi-layer heads (intact.regularizers.crown): sound against sampled and
gradient-ascent drift, exact for one Linear layer, and tighter than the interval certificate where it matters."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from intact.experiments.certificate_width import LONG, ascent_drift, box, head, updated
from intact.regularizers.crown import difference_bounds, supports
from intact.regularizers.interval import sequential_drift_bounds


CASES = [([12, 16, 5], 0.01), ([12, 16, 16, 5], 0.01), ([8, 24, 4], 0.0), ([10, 12, 12, 6], 0.1)]


@pytest.mark.parametrize("dims, slope", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_crown_bounds_are_sound_against_sampled_and_ascent_drift(dims, slope, seed):
    old = head(dims, slope, seed)
    new = updated(old, 0.3, seed + 10)
    lo, hi = box(dims[0], seed + 20)
    c_lo, c_hi = difference_bounds(list(new), list(old), lo, hi)
    g = torch.Generator().manual_seed(seed)
    z = lo + (hi - lo) * torch.rand((20000, dims[0]), generator=g, dtype=torch.float64)
    with torch.no_grad():
        d = new(z) - old(z)
    corners = lo + (hi - lo) * torch.randint(0, 2, (2000, dims[0]), generator=g).double()
    with torch.no_grad():
        d = torch.cat([d, new(corners) - old(corners)])
    tol = 1e-9
    assert (d.min(0).values >= c_lo - tol).all() and (d.max(0).values <= c_hi + tol).all()
    a_lo, a_hi = ascent_drift(new, old, lo, hi)
    assert (a_lo >= c_lo - tol).all() and (a_hi <= c_hi + tol).all(), (a_lo - c_lo, c_hi - a_hi)


def test_one_linear_layer_is_exact_and_equals_the_interval_certificate():
    old = head([7, 4], 0.01, 0)
    new = updated(old, 0.3, 1)
    lo, hi = box(7, 2)
    c = difference_bounds(list(new), list(old), lo, hi)
    i = sequential_drift_bounds(list(new), list(old), lo, hi)
    assert torch.allclose(c[0], i[0], atol=1e-12) and torch.allclose(c[1], i[1], atol=1e-12)
    # exact: the corner each bound names attains it
    dW, db = new[0].weight - old[0].weight, new[0].bias - old[0].bias
    z = torch.where(dW > 0, lo, hi)                                     # the minimising corner per output
    with torch.no_grad():
        assert torch.allclose((z * dW).sum(1) + db, c[0], atol=1e-12)


def test_crown_is_tighter_than_intervals_on_deeper_heads_with_large_updates():
    ratios = []
    for seed in range(4):
        for dims in ([12, 16, 5], [12, 16, 16, 5]):
            old = head(dims, 0.01, seed)
            new = updated(old, 0.3, seed + 10)
            lo, hi = box(dims[0], seed + 20)
            c = difference_bounds(list(new), list(old), lo, hi)
            i = sequential_drift_bounds(list(new), list(old), lo, hi)
            width = lambda b: float(torch.maximum(b[0].abs(), b[1].abs()).max())  # noqa: E731
            ratios.append(width(i) / width(c))
    assert min(ratios) >= 1.0 and sum(ratios) / len(ratios) > 1.2, ratios


def test_supports_only_linear_heads():
    assert supports(list(head([4, 5, 3], 0.01, 0)))
    assert not supports([nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2, 3)])


def test_a_leaky_relu_steeper_than_one_keeps_the_certificate_sound():
    """A slope above 1 makes LeakyReLU concave: the relaxations (convex, slopes in [s, 1]) put their lines on the
    wrong side, and the certificate of Linear-LeakyReLU(2)-Linear came out below drift sampled in the box (a width
    of 1.9 against 3.5 sampled). Such a head is bounded by intervals alone, whose rounding margin scales with the
    slope; a negative slope (not monotone) is refused."""
    from intact.regularizers.certificate import drift_certificate
    from intact.regularizers.interval import activation_slope

    old = head([4, 8, 3], 2.0, 0).float()
    new = updated(old, 0.5, 1)
    assert not supports(list(new))
    lo, hi = -torch.ones(4), torch.ones(4)
    cert = drift_certificate(list(new), list(old), lo, hi)
    z = lo + (hi - lo) * torch.rand((20000, 4), generator=torch.Generator().manual_seed(2))
    corners = lo + (hi - lo) * torch.randint(0, 2, (256, 4), generator=torch.Generator().manual_seed(3)).float()
    with torch.no_grad():
        d = torch.cat([new(z) - old(z), new(corners) - old(corners)]).double()
    assert (d.min(0).values >= cert["lower"]).all() and (d.max(0).values <= cert["upper"]).all()
    assert list(cert["widths"]) == ["interval"]
    with pytest.raises(ValueError, match="not monotone"):
        activation_slope(nn.LeakyReLU(-0.5))


def test_the_regularizer_records_both_certificates_for_a_deeper_head():
    from intact.regularizers.hypercube import Hypercube
    from intact.regularizers.regularizer import HypercubeTracker

    model = head([6, 8, 3], 0.01, 0).float()
    reg = HypercubeTracker(model, ["0", "2"])
    new = updated(model, 0.3, 3)
    lo, hi = box(6, 4)
    info = reg.certificate(new, model, Hypercube(lo.float(), hi.float()))
    assert info["certificate"] <= min(info["certificate_interval"], info["certificate_crown"]) + 1e-6
    assert info["sampled_drift"] <= info["certificate"] + 1e-6


@pytest.mark.parametrize("dims", [[8, 16, 4], [8, 16, 16, 4]])
@pytest.mark.parametrize("schedule", [{}, pytest.param(LONG, marks=pytest.mark.slow)], ids=["training", "long"])
def test_optimised_slopes_tighten_large_updates_and_stay_sound(dims, schedule):
    """At a large update the optimised-slope bound (both networks, slopes of every layer) is well below CROWN on
    the difference network and still above every drift that sampling and gradient ascent find, with the
    training's optimisation and with the long one (200 iterations, decaying learning rate), which is tighter."""
    from intact.regularizers.certificate import drift_certificate

    old = head(dims, 0.0, 3)
    new = updated(old, 1.0, 13)
    lo, hi = box(dims[0], 23)
    cert = drift_certificate(list(new), list(old), lo, hi, **schedule)
    w = cert["widths"]
    assert w["alpha"] < 0.9 * w["crown"], w
    if schedule:
        assert w["alpha"] < drift_certificate(list(new), list(old), lo, hi)["widths"]["alpha"]
    a_lo, a_hi = ascent_drift(new, old, lo, hi, steps=100, restarts=4)
    g = torch.Generator().manual_seed(0)
    z = lo + (hi - lo) * torch.rand((5000, dims[0]), generator=g, dtype=torch.float64)
    with torch.no_grad():
        d = torch.cat([new(z) - old(z), a_lo[None], a_hi[None]])
    assert (d >= cert["lower"]).all() and (d <= cert["upper"]).all()


def test_the_certificate_leaves_the_models_gradients_and_random_state_as_they_were():
    """The certificate is a report: its slope optimisation (autograd on copies) changes no parameter, leaves no
    gradient on the live modules and draws nothing from the global generator, so it cannot feed training."""
    from intact.regularizers.hypercube import Hypercube
    from intact.regularizers.regularizer import HypercubeTracker

    model = head([6, 8, 8, 3], 0.0, 0).float()
    new = updated(model, 1.0, 3)
    reg = HypercubeTracker(model, ["0", "2", "4"])
    lo, hi = box(6, 4)
    before = [p.detach().clone() for p in [*new.parameters(), *model.parameters()]]
    rng = torch.get_rng_state()
    info = reg.certificate(new, model, Hypercube(lo.float(), hi.float()))
    assert "certificate_alpha" in info
    assert torch.equal(torch.get_rng_state(), rng)
    after = [*new.parameters(), *model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(after, before)) and all(p.grad is None for p in after)
