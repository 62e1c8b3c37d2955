"""Trainable-parameter counts of methods on ViT-B/16 with a paper config's settings (no data, no download).

    python tools/count_trainable.py [--config configs/paper/imagenet_r.yaml --benchmark imagenet_r
                                     --classes 200 --tasks 15 --methods s_prompts inflora coda_p]

Builds a randomly initialised ``vit_base_patch16_224`` on torch's ``meta`` device (shapes only: no memory,
no weights) and each method on it, and prints per method: the parameters one task's optimizer trains
(``num_trainable_parameters`` at the last task), the parameters learned over all tasks (every parameter
outside the frozen backbone: all domains' prompts and heads, all tasks' LoRA B), the fixed buffers that
are part of the learned state (InfLoRA's A, DualGPM's bases), and the paper's efficiency-table count.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from intact.cli import existing_file  # noqa: E402
from intact.config import resolve_run  # noqa: E402
from intact.layering import read_layers  # noqa: E402
from intact.methods import create_method  # noqa: E402
from intact.methods.shared.base import frozen_prefixes, num_trainable_parameters  # noqa: E402
from intact.models.backbone import FrozenViT, create_vit  # noqa: E402
from intact.report.paper import paper_numbers  # noqa: E402

OURS_TO_PAPER = {"s_prompts": "S-Prompts", "compositional_prompt": "C-Prompt", "ka_prompt": "KA-Prompt",
                 "coda_p": "CODA-Prompt", "l2p": "L2P", "dualprompt": "DualPrompt", "consistent_prompt": "CPrompt"}


def counts(cfg: dict, benchmark: str, method: str, classes: int, tasks: int) -> dict[str, int]:
    """Per-task trainable, learned over all tasks, and stored fixed buffers of ``method``."""
    run = resolve_run(cfg, benchmark, method, 0)
    with torch.device("meta"):
        backbone = FrozenViT(create_vit("vit_base_patch16_224"), (0.0,) * 3, (1.0,) * 3)
        m = create_method(run, backbone, classes, tasks)
    last = tasks - 1
    m.task = last
    pool = getattr(m, "pool", None)
    if hasattr(pool, "B"):          # InfLoRA: only the current task's B trains (begin_task without its data pass)
        pool.begin_task(last)
    frozen = frozen_prefixes(m)
    learned = sum(p.numel() for n, p in m.named_parameters() if not n.startswith(frozen))
    buffers = sum(b.numel() for n, b in m.named_buffers() if not n.startswith(frozen) and b.dim() > 0
                  and n.split(".")[-1] in ("A", "basis"))
    return {"per_task": num_trainable_parameters(m), "all_tasks": learned, "fixed_buffers": buffers}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=existing_file, default=str(REPO / "configs/paper/imagenet_r.yaml"))
    ap.add_argument("--benchmark", default="imagenet_r")
    ap.add_argument("--classes", type=int, default=200)
    ap.add_argument("--tasks", type=int, default=15)
    ap.add_argument("--methods", nargs="+", default=["s_prompts", "inflora", "inflora+intact", "coda_p"])
    args = ap.parse_args(argv)
    cfg = read_layers(args.config)   # a paper config: its base.yaml, then the overlay
    paper = {r["method"]: r["trainable_parameters"] for r in paper_numbers()["efficiency"]["rows"]}
    print(f"{'method':<16}{'per task':>12}{'all tasks':>12}{'fixed bufs':>12}{'paper':>12}")
    for method in args.methods:
        c = counts(cfg, args.benchmark, method, args.classes, args.tasks)
        p = paper.get(OURS_TO_PAPER.get(method, ""))
        paper_count = f"{p:,}" if p else "—"
        print(f"{method:<16}{c['per_task']:>12,}{c['all_tasks']:>12,}{c['fixed_buffers']:>12,}{paper_count:>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
