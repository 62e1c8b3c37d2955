"""Deterministic image domains for the embedded benchmark.

Each domain maps a batch of clean images ``(N, 1, H, W)`` in [0, 1] to the same images under one
transformation; per-image randomness (shear angle, occluder position, noise) comes from the
generator passed in, so a domain is a pure function of (images, seed). Strengths follow the sizing
study in ``docs/benchmarks.md`` (how the domains were sized): each domain hurts a frozen clean-pretrained
backbone but stays learnable with prompts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

Domain = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
DOMAINS: dict[str, Domain] = {}


def register_domain(fn: Domain) -> Domain:
    DOMAINS[fn.__name__] = fn
    return fn


def apply_domain(name: str, images: torch.Tensor, seed: int) -> torch.Tensor:
    """Apply domain ``name`` to ``images`` (N, 1, H, W) in [0, 1]; the result is clamped to [0, 1]."""
    if name not in DOMAINS:
        raise KeyError(f"unknown domain {name!r}; known: {', '.join(sorted(DOMAINS))}")
    g = torch.Generator().manual_seed(seed)
    return DOMAINS[name](images.clone(), g).clamp_(0.0, 1.0).contiguous()


def _gaussian_kernel(sigma: float) -> torch.Tensor:
    radius = int(math.ceil(3 * sigma))
    t = torch.arange(-radius, radius + 1, dtype=torch.float32)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


def _blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    k = _gaussian_kernel(sigma)
    r = k.numel() // 2
    x = F.pad(x, (r, r, 0, 0), mode="replicate")
    x = F.conv2d(x, k.view(1, 1, 1, -1))
    x = F.pad(x, (0, 0, r, r), mode="replicate")
    return F.conv2d(x, k.view(1, 1, -1, 1))


def _affine(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


@register_domain
def blur(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Strong Gaussian blur (sigma 3.5 px at 32 px)."""
    return _blur(x, 3.5 * x.shape[-1] / 32)


@register_domain
def contrast(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Contrast reduced to a fifth around a grey level."""
    return 0.4 + 0.2 * x


@register_domain
def pixelate(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Average down to 6x6, then nearest-neighbour back up."""
    size = x.shape[-1]
    return F.interpolate(F.adaptive_avg_pool2d(x, 6), size=size, mode="nearest")


@register_domain
def thick(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Stroke thickening: 7x7 grey dilation (max filter)."""
    return F.max_pool2d(x, kernel_size=7, stride=1, padding=3)


@register_domain
def shear(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Horizontal shear by 35-45 degrees."""
    n = x.shape[0]
    angle = torch.empty(n).uniform_(35.0, 45.0, generator=g)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = 1.0
    theta[:, 1, 1] = 1.0
    theta[:, 0, 1] = torch.tan(torch.deg2rad(angle))
    return _affine(x, theta)


@register_domain
def stripes(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Half image, half horizontal sinusoidal stripes with a random phase."""
    n, _, h, w = x.shape
    phase = torch.empty(n, 1, 1, 1).uniform_(0, 2 * math.pi, generator=g)
    rows = torch.arange(h, dtype=torch.float32).view(1, 1, h, 1)
    pattern = 0.5 + 0.5 * torch.sin(2 * math.pi * rows / (h / 5) + phase)
    return 0.5 * x + 0.5 * pattern.expand(n, 1, h, w)


@register_domain
def noise(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Additive Gaussian noise, std 0.3."""
    return x + 0.3 * torch.randn(x.shape, generator=g)


@register_domain
def fog(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Low-frequency haze: 0.6 x + 0.6 * (4x4 uniform noise, bilinearly upsampled)."""
    n, c, h, w = x.shape
    haze = torch.rand(n, c, 4, 4, generator=g)
    haze = F.interpolate(haze, size=(h, w), mode="bilinear", align_corners=False)
    return 0.6 * x + 0.6 * haze


@register_domain
def occlude(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A white square of 14/32 of the side at a random place."""
    n, _, h, w = x.shape
    side = round(14 * h / 32)
    top = torch.randint(0, h - side + 1, (n,), generator=g)
    left = torch.randint(0, w - side + 1, (n,), generator=g)
    for i in range(n):
        x[i, :, top[i] : top[i] + side, left[i] : left[i] + side] = 1.0
    return x


@register_domain
def edges(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Sobel gradient magnitude, normalised by each image's maximum."""
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]).view(1, 1, 3, 3)
    xp = F.pad(x, (1, 1, 1, 1), mode="replicate")
    gx = F.conv2d(xp, kx)
    gy = F.conv2d(xp, kx.transpose(-1, -2))
    mag = torch.sqrt(gx**2 + gy**2)
    return mag / mag.amax(dim=(1, 2, 3), keepdim=True).clamp_min(1e-8)


@register_domain
def invert(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Photometric inversion (hard for a frozen tiny backbone; not in the default sequence)."""
    return 1.0 - x


@register_domain
def rotate(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Rotation by 90 degrees (hard for a frozen tiny backbone; not in the default sequence)."""
    return torch.rot90(x, 1, dims=(2, 3))


@register_domain
def speckle(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Multiplicative noise plus salt: x * (1 + 0.8 n) with n ~ N(0, 1)."""
    return x * (1 + 0.8 * torch.randn(x.shape, generator=g)) + 0.2 * (torch.rand(x.shape, generator=g) > 0.9)


@register_domain
def elastic(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Elastic warp: a smooth random displacement field (alpha 4 px, sigma 3 px at 32 px)."""
    n, _, h, w = x.shape
    disp = torch.randn(n, 2, h, w, generator=g)
    disp = _blur(disp.view(n * 2, 1, h, w), 3.0 * h / 32).view(n, 2, h, w)
    disp = disp / disp.flatten(1).std(dim=1).clamp_min(1e-8).view(n, 1, 1, 1) * (4.0 * 2 / h)
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
    grid = torch.stack((xs, ys), dim=-1).expand(n, h, w, 2) + disp.permute(0, 2, 3, 1)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
