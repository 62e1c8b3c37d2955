"""Per-neuron activation hypercubes (the paper's Eq. hypercube and the union rule)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from intact.io import load_tensors, save_tensors


def percentile(x: torch.Tensor, q: float, method: str = "linear") -> torch.Tensor:
    """Per-column ``q``-th percentile of ``x`` (N, d).

    ``linear`` interpolates between order statistics (numpy's default); ``index`` takes the sorted
    value at ``floor(q/100 * N)`` (the reference code). Sort-based, so it has no size limit
    (``torch.quantile`` refuses large inputs) and is differentiable with respect to ``x``.
    """
    return _of_sorted(_sorted(x), q, method)


def _sorted(x: torch.Tensor) -> torch.Tensor:
    """``x`` sorted along its first dimension (what every percentile of it is read from)."""
    if x.shape[0] == 0:
        raise ValueError("percentile of an empty set")
    return x.sort(dim=0).values


def _of_sorted(s: torch.Tensor, q: float, method: str) -> torch.Tensor:
    """The ``q``-th percentile of each column of the sorted ``s`` (see :func:`percentile`)."""
    n = s.shape[0]
    if method == "index":
        return s[min(int(q / 100.0 * n), n - 1)].clone()  # not a view: it would keep all of ``s`` alive
    if method != "linear":
        raise ValueError(f"percentile method {method!r}: expected 'linear' or 'index'")
    pos = (q / 100.0) * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return s[lo] + frac * (s[hi] - s[lo])


@dataclass
class Hypercube:
    """A box ``[lower, upper]`` in a layer's activation space."""

    lower: torch.Tensor
    upper: torch.Tensor

    @classmethod
    def from_activations(cls, acts: torch.Tensor, alpha: float, method: str = "linear") -> Hypercube:
        """Bounds at the ``alpha``-th and ``(100 - alpha)``-th percentile of each neuron.

        ``acts`` is ``(N, ...)``: a conv input ``(N, C, H, W)`` gets one interval per (channel, position). A
        non-finite activation is refused (it would sort as the largest value and move the box, or make it NaN), and
        so is an ``alpha`` outside [0, 50] (a box with lower > upper).
        """
        if not 0.0 <= alpha <= 50.0:
            raise ValueError(f"hypercube percentile alpha={alpha}: expected 0 <= alpha <= 50")
        if not bool(torch.isfinite(acts).all()):
            bad = int((~torch.isfinite(acts)).sum())
            raise ValueError(f"hypercube of activations with {bad} non-finite values of {acts.numel()} "
                             f"{tuple(acts.shape)}")
        s = _sorted(acts.detach().float())  # once for both bounds: the sort is most of the cost
        return cls(_of_sorted(s, alpha, method), _of_sorted(s, 100.0 - alpha, method))

    def union(self, other: Hypercube | None) -> Hypercube:
        """The smallest box containing both (the cumulative update rule)."""
        if other is None:
            return Hypercube(self.lower.clone(), self.upper.clone())
        return Hypercube(torch.minimum(self.lower, other.lower), torch.maximum(self.upper, other.upper))

    @property
    def dim(self) -> int:
        return self.lower.numel()

    @property
    def width(self) -> torch.Tensor:
        return self.upper - self.lower

    @property
    def center(self) -> torch.Tensor:
        return (self.lower + self.upper) / 2

    @property
    def radius(self) -> torch.Tensor:
        """The paper's r: the mean half-width over neurons."""
        return (self.width / 2).mean()

    def log_volume(self) -> float:
        """Natural log of the volume (a product of d widths under/overflows in float)."""
        return float(torch.log(self.width.clamp_min(1e-30)).sum())

    def contains(self, x: torch.Tensor) -> torch.Tensor:
        """Per sample: is every coordinate inside the box? (``x``: a batch of the box's shape)"""
        inside = (x >= self.lower) & (x <= self.upper)
        return inside.reshape(*inside.shape[: inside.dim() - self.lower.dim()], -1).all(dim=-1)

    def inside_fraction(self, x: torch.Tensor) -> float:
        """Fraction of (sample, neuron) coordinates inside their interval."""
        return float(((x >= self.lower) & (x <= self.upper)).float().mean())

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n`` points drawn uniformly from the box."""
        # drawn on the CPU (a CPU generator): the same points on every device
        u = torch.rand(n, *self.lower.shape, generator=generator, dtype=self.lower.dtype).to(self.lower.device)
        return self.lower + u * self.width

    def flat(self) -> Hypercube:
        """The same box over the flattened coordinates (a conv input's (C, H, W) box as one vector)."""
        return Hypercube(self.lower.flatten(), self.upper.flatten())

    def to(self, device: torch.device | str) -> Hypercube:
        return Hypercube(self.lower.to(device), self.upper.to(device))

    def summary(self) -> dict[str, float]:
        return {
            "dim": self.dim,
            "log_volume": self.log_volume(),
            "mean_width": float(self.width.mean()),
            "radius": float(self.radius),
        }


def save_hypercubes(path: str | Path, cubes: dict[str, Hypercube], metadata: dict[str, str] | None = None) -> str:
    """Store ``{layer: cube}`` as ``<layer>.lower`` / ``<layer>.upper`` tensors (an empty file if none); the
    file's sha256."""
    tensors = {}
    for name, cube in cubes.items():
        tensors[f"{name}.lower"] = cube.lower
        tensors[f"{name}.upper"] = cube.upper
    return save_tensors(path, tensors, metadata)


def load_hypercubes(path: str | Path, expect: dict[str, str] | None = None) -> dict[str, Hypercube]:
    t = load_tensors(path, expect)
    names = sorted({k.rsplit(".", 1)[0] for k in t})
    inverted = [n for n in names if bool((t[f"{n}.lower"] > t[f"{n}.upper"]).any())]
    if inverted:
        raise ValueError(f"{path}: hypercube {', '.join(inverted)} has a lower bound above its upper bound")
    return {n: Hypercube(t[f"{n}.lower"], t[f"{n}.upper"]) for n in names}
