"""Trainable parameters of methods as built on a timm ViT with random weights (nothing downloaded, no training).

    PYTHONPATH=src python tools/count_trainable.py --config configs/paper/imagenet_r.yaml \
        --methods c_prompt ka_prompt "ka_prompt@methods.ka_prompt.expert_last=4"

Each method is built as a training job builds it (``create_method`` on a ``FrozenViT``) for the benchmark's
classes and tasks; the count is ``num_trainable_parameters()`` (the optimizer's parameter groups), split
by group, so it can be set beside a paper's reported count.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from intact.bench import load_layered
from intact.config import resolve_run
from intact.methods import create_method
from intact.models.backbone import FrozenViT, create_vit


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=Path("configs/paper/imagenet_r.yaml"))
    p.add_argument("--benchmark", default=None)
    p.add_argument("--model", default="vit_base_patch16_224")
    p.add_argument("--classes", type=int, default=200)
    p.add_argument("--tasks", type=int, default=15)
    p.add_argument("--methods", nargs="+", default=["c_prompt", "ka_prompt"])
    args = p.parse_args()
    cfg = load_layered([Path("config.yaml"), args.config])
    benchmark = args.benchmark or cfg["run"]["benchmarks"][0]
    vit = create_vit(args.model)
    backbone = FrozenViT(vit, (0.5,) * 3, (0.5,) * 3)
    for method in args.methods:
        run = resolve_run(cfg, benchmark, method, 0)
        torch.manual_seed(0)
        m = create_method(run, backbone, args.classes, args.tasks)
        groups = {g["name"]: sum(q.numel() for q in g["params"]) for g in m.param_groups()}
        parts = {n: q.numel() for n, q in m.named_parameters() if q.requires_grad}
        print(f"{method}: {m.num_trainable_parameters():,} trainable ({args.model}, {args.classes} classes, {args.tasks} tasks)")
        print(f"  groups: {groups}")
        print(f"  tensors: {parts}")


if __name__ == "__main__":
    main()
