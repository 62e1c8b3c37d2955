"""Self-pretraining of a small backbone on a benchmark's clean split (the embedded default).

Real benchmarks load published weights from a local file instead (``backbones.<name>.weights``).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from tqdm import tqdm

from intact.data import open_benchmark
from intact.guard import NonFiniteError, nonfinite
from intact.hashing import sha256_file
from intact.io import save_tensors, write_json
from intact.models.backbone import create_vit
from intact.provenance import provenance
from intact.seeding import configure_torch, seed_everything
from intact.settings import BackboneConfig, plain


def random_affine(x: torch.Tensor, g: torch.Generator, degrees: float = 10.0, translate: float = 0.1,
                  scale: tuple[float, float] = (0.9, 1.1)) -> torch.Tensor:
    """Light per-image random rotation / translation / scaling (batched, generator-driven)."""
    n = x.shape[0]
    ang = torch.deg2rad(torch.empty(n).uniform_(-degrees, degrees, generator=g))
    s = torch.empty(n).uniform_(*scale, generator=g)
    t = torch.empty(n, 2).uniform_(-2 * translate, 2 * translate, generator=g)
    theta = torch.stack([
        torch.stack([torch.cos(ang) / s, -torch.sin(ang) / s, t[:, 0]], 1),
        torch.stack([torch.sin(ang) / s, torch.cos(ang) / s, t[:, 1]], 1),
    ], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, padding_mode="zeros", align_corners=False)


@torch.no_grad()
def _accuracy(model: torch.nn.Module, loader: DataLoader, mean: torch.Tensor, std: torch.Tensor,
              device: torch.device) -> float:
    model.eval()
    correct = total = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        correct += int((model((x - mean) / std).argmax(1) == y).sum())
        total += len(y)
    return 100.0 * correct / max(total, 1)


def pretrain_backbone(cfg: BackboneConfig, manifest: Path, out_weights: Path, out_info: Path,
                      threads: int | None = None,
                      progress: bool = True, benchmark: Any = None) -> dict[str, Any]:
    """Train ``cfg.model`` with a classifier on the clean split, save the backbone (head dropped). ``benchmark``:
    the pretraining benchmark's resolved settings, which the manifest must match (intact.data.manifest)."""
    p = cfg.pretrain
    device = configure_torch(threads)
    seed_everything(p.seed)
    bench = open_benchmark(manifest, benchmark)
    model = create_vit(cfg.model, num_classes=bench.num_classes).to(device)
    mean = torch.tensor(cfg.input_mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(cfg.input_std, device=device).view(1, -1, 1, 1)
    train = bench.pretrain_set()
    loader = DataLoader(train, batch_size=p.batch_size, shuffle=True, generator=torch.Generator().manual_seed(p.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=p.lr,
                                                total_steps=p.epochs * math.ceil(len(train) / p.batch_size))
    g = torch.Generator().manual_seed(p.seed + 1)
    t0 = time.perf_counter()
    for _ in tqdm(range(p.epochs), desc=f"pretrain {cfg.name}", disable=not progress, file=sys.stderr, mininterval=1.0):
        model.train()
        for x, y in loader:
            x = random_affine(x, g).to(device)
            loss = F.cross_entropy(model((x - mean) / std), y.to(device), label_smoothing=p.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    seconds = time.perf_counter() - t0
    clean_acc = _accuracy(model, DataLoader(bench.clean_test_set(), batch_size=512), mean, std, device)
    frozen_head = {
        name: _accuracy(model, DataLoader(bench.eval_set(t), batch_size=512), mean, std, device)
        for t, name in enumerate(bench.task_names)
    }
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("head.")}
    unfinite = next((k for k, v in state.items() if nonfinite(v)), None)
    if unfinite is not None:  # every run on it would stop at its first step, blaming its own rates
        raise NonFiniteError(f"backbone {cfg.name!r}: pretraining left {unfinite!r} not finite (NaN or Inf), so no "
                             f"weights were written: lower backbones.{cfg.name}.pretrain.lr (now {p.lr:g})")
    save_tensors(out_weights, state, {"model": cfg.model})
    info = {
        "backbone": cfg.name, "model": cfg.model, "source": "pretrained here", "pretrain": plain(cfg.pretrain),
        "parameters": sum(v.numel() for v in state.values()), "seconds": seconds,
        "clean_test_accuracy": clean_acc, "frozen_head_accuracy_per_domain": frozen_head,
        "sha256": sha256_file(out_weights), "data_sha256": bench.manifest["files"], "provenance": provenance(),
    }
    write_json(out_info, info)
    return info


def initialise_backbone(model: str, seed: int, out_weights: Path) -> None:
    """Weights of timm model ``model`` as initialised under ``seed`` (a rehearsal's tiny backbone, intact.rehearsal),
    written as a weights file records them: ``describe_weights`` then checks and records them with their sha256."""
    torch.manual_seed(seed)
    vit = create_vit(model)
    save_tensors(out_weights, {k: v for k, v in vit.state_dict().items() if not k.startswith("head.")},
                 {"timm_model": model})


def describe_weights(cfg: BackboneConfig, weights: Path, out_info: Path) -> dict[str, Any]:
    """Check a user-supplied weights file (exists, checksum, fits the model) and record its provenance."""
    from intact.models.backbone import create_backbone

    backbone, digest = create_backbone(cfg, weights)
    info = {
        "backbone": cfg.name, "model": cfg.model, "source": str(weights), "sha256": digest,
        "parameters": sum(p.numel() for p in backbone.parameters()), "provenance": provenance(),
    }
    write_json(out_info, info)
    return info
