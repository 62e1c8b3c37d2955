import numpy as np
import pytest
import torch

from intact.regularizers.hypercube import Hypercube, load_hypercubes, percentile, save_hypercubes


@pytest.mark.parametrize("q", [0.0, 5.0, 37.5, 50.0, 95.0, 100.0])
@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_percentile_matches_numpy(q, n):
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    np.testing.assert_allclose(percentile(x, q).numpy(), np.percentile(x.numpy(), q, axis=0), rtol=1e-12, atol=1e-12)


def test_hypercube_bounds_are_per_neuron_percentiles():
    x = torch.arange(101, dtype=torch.float32).unsqueeze(1).repeat(1, 3) * torch.tensor([1.0, 2.0, -1.0])
    cube = Hypercube.from_activations(x, 5.0)
    torch.testing.assert_close(cube.lower, torch.tensor([5.0, 10.0, -95.0]))
    torch.testing.assert_close(cube.upper, torch.tensor([95.0, 190.0, -5.0]))
    # 90 % of each neuron's values lie inside its interval (the central p = 90 %)
    inside = ((x >= cube.lower) & (x <= cube.upper)).float().mean(0)
    assert torch.allclose(inside, torch.full((3,), 91 / 101))


def test_union_is_smallest_box_containing_both():
    a = Hypercube(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]))
    b = Hypercube(torch.tensor([-1.0, 1.5]), torch.tensor([0.5, 3.0]))
    u = a.union(b)
    torch.testing.assert_close(u.lower, torch.tensor([-1.0, 1.0]))
    torch.testing.assert_close(u.upper, torch.tensor([1.0, 3.0]))
    assert a.union(None).lower is not a.lower  # a copy, not an alias
    pts = torch.cat([a.sample(100), b.sample(100)])
    assert u.contains(pts).all()


def test_geometry_and_membership():
    c = Hypercube(torch.tensor([0.0, -2.0]), torch.tensor([2.0, 2.0]))
    torch.testing.assert_close(c.center, torch.tensor([1.0, 0.0]))
    assert float(c.radius) == pytest.approx(1.5)  # mean half-width: (1 + 2) / 2
    assert c.log_volume() == pytest.approx(np.log(8.0))
    assert c.contains(torch.tensor([[1.0, 0.0], [2.0, 2.0], [2.1, 0.0]])).tolist() == [True, True, False]
    assert c.inside_fraction(torch.tensor([[2.1, 0.0]])) == pytest.approx(0.5)


def test_save_and_load_roundtrip(tmp_path):
    cubes = {"fc0": Hypercube(torch.zeros(3), torch.ones(3)), "fc1": Hypercube(-torch.ones(2), torch.ones(2))}
    save_hypercubes(tmp_path / "h.safetensors", cubes)
    back = load_hypercubes(tmp_path / "h.safetensors")
    assert set(back) == {"fc0", "fc1"}
    torch.testing.assert_close(back["fc1"].lower, -torch.ones(2))


@pytest.mark.parametrize("method", ["linear", "index"])
def test_a_box_from_one_sort_is_its_two_percentiles_and_saves(tmp_path, method):
    """from_activations sorts once for both bounds: each is the percentile alone, bit for bit; neither keeps
    the sorted activations alive (a box is kept for every later task); saved and loaded unchanged."""
    x = torch.randn(257, 6, generator=torch.Generator().manual_seed(3))
    cube = Hypercube.from_activations(x, 5.0, method)
    assert torch.equal(cube.lower, percentile(x, 5.0, method)) and torch.equal(cube.upper, percentile(x, 95.0, method))
    assert all(b.untyped_storage().nbytes() == b.numel() * b.element_size() for b in (cube.lower, cube.upper))
    save_hypercubes(tmp_path / "h.safetensors", {"fc": cube})
    back = load_hypercubes(tmp_path / "h.safetensors")["fc"]
    assert torch.equal(back.lower, cube.lower) and torch.equal(back.upper, cube.upper)


def test_a_box_of_non_finite_activations_a_percentile_past_50_or_an_inverted_file_is_refused(tmp_path):
    """A NaN sorted as the largest activation and moved the box (or made it NaN: inf - inf); alpha > 50 gave
    lower > upper, a negative radius and an inverted certificate; a stored box with lower > upper loaded as any."""
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
    x[5, 1] = float("nan")
    with pytest.raises(ValueError, match="1 non-finite values"):
        Hypercube.from_activations(x, 5.0)
    with pytest.raises(ValueError, match="alpha=60"):
        Hypercube.from_activations(torch.randn(64, 3), 60.0)
    save_hypercubes(tmp_path / "h.safetensors", {"fc": Hypercube(torch.ones(2), torch.zeros(2))})
    with pytest.raises(ValueError, match="hypercube fc has a lower bound above its upper bound"):
        load_hypercubes(tmp_path / "h.safetensors")


def test_a_batchnorm_without_running_statistics_is_refused_as_a_protected_layer():
    from intact.regularizers.regularizer import HypercubeTracker

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4, track_running_stats=False))
    with pytest.raises(ValueError, match="track_running_stats=False"):
        HypercubeTracker(model, ["0", "1"])
