"""Real training steps at paper scale on a synthetic ImageNet-R-layout tree (no data or weights download).

    python tools/paper_scale_check.py OUTDIR [--model vit_base_patch16_224.augreg_in21k --size 224
                                              --batch 64 --steps 300 --device cuda]

Writes a tree of ``--size``-pixel JPEGs (4 classes x 2 domains), prepares it as the ``imagenet_r`` type
does, saves a randomly initialised ``--model`` as the backbone file, and trains ``coda_p+intact`` (the
paper config's settings, ``configs/paper/imagenet_r.yaml``) on its two tasks through the real code path
(query cache, teacher cache, loader, guard, checkpoints, in-job evaluation) for about ``--steps``
optimizer steps in all. Prints and writes ``OUTDIR/paper_scale.json``: images/s and seconds per task,
peak memory, the per-task state size and its share of the authors' 350 MB full checkpoints.
``tools/gpu_check.sh`` runs it at paper scale on a GPU; ``--model vit_rgb_p8 --size 32`` checks it on a CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from intact.config import load_config  # noqa: E402
from intact.cache import build_query_cache  # noqa: E402
from intact.config import benchmark_config, resolve_run  # noqa: E402
from intact.data import benchmark_class  # noqa: E402
from intact.models.backbone import create_vit  # noqa: E402
from intact.train import train_task  # noqa: E402

WNIDS = ["n01443537", "n01833805", "n02007558", "n02051845"]  # four ImageNet-R classes
DOMAINS = ["art", "cartoon"]
AUTHORS_CHECKPOINT_MB = 350.0


def make_tree(root: Path, lists: Path, size: int, per_class: int, seed: int = 0) -> None:
    """``<root>/<wnid>/<domain>_<n>.jpg`` (size x size, colour by label) and 80/20 train/test lists."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label, wnid in enumerate(WNIDS):
        base = np.array([(label * 70) % 256, (label * 130 + 40) % 256, (label * 200 + 90) % 256], dtype=np.float64)
        for d in DOMAINS:
            for n in range(per_class):
                rel = f"{wnid}/{d}_{n}.jpg"
                (root / wnid).mkdir(parents=True, exist_ok=True)
                img = np.clip(base + rng.normal(0, 40, (size, size, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(img).save(root / rel, quality=90)
                (test if n % 5 == 4 else train).append(f"{rel} {label}\n")
    lists.mkdir(parents=True, exist_ok=True)
    (lists / "train.txt").write_text("".join(train))
    (lists / "test.txt").write_text("".join(test))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--model", default="vit_base_patch16_224.augreg_in21k")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=300, help="optimizer steps over both tasks (about)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    out = args.out.resolve()
    # images per task so that 2 tasks x epochs x steps/epoch ~ --steps (4/5 of each task's images train)
    steps_per_epoch = max(1, math.ceil(args.steps / (2 * args.epochs)))
    per_class = math.ceil(steps_per_epoch * args.batch / (len(WNIDS) * 0.8))
    t0 = time.perf_counter()
    make_tree(out / "tree", out / "lists", args.size, per_class)
    cfg = load_config(REPO / "config.yaml", REPO / "configs/paper/imagenet_r.yaml", check_files=False)
    weights = out / "backbone.safetensors"
    from safetensors.torch import save_file

    torch.manual_seed(0)
    save_file(create_vit(args.model).state_dict(), str(weights))
    cfg["benchmarks"]["imagenet_r"].update(root=str(out / "tree"), split=str(out / "lists"), domains=DOMAINS,
                                           image_size=args.size)
    bb = cfg["benchmarks"]["imagenet_r"]["backbone"]
    cfg["backbones"][bb].update(model=args.model, weights=str(weights), sha256=None)
    cfg["optim"].update(epochs=args.epochs, batch_size=args.batch)
    if len(create_vit(args.model).blocks) < 5:  # a tiny CPU model: prompt its first blocks only
        cfg["methods"]["coda_p"]["layers"] = [0, 1]
    bcfg = benchmark_config(cfg, "imagenet_r")
    manifest = benchmark_class(bcfg.type).prepare(bcfg, out / "data", progress=False)
    setup_s = time.perf_counter() - t0
    run = resolve_run(cfg, "imagenet_r", "coda_p+intact", 0)
    build_query_cache(run.backbone, manifest, weights, out / "query", batch_size=run.optim.eval_batch_size,
                      amp=run.optim.amp, threads=args.threads, progress=False)
    tasks = []
    for t in range(2):
        d = out / "runs" / f"task{t}"
        rec = train_task(run, t, manifest=manifest, backbone_weights=weights, out_dir=d,
                         prev_dir=out / "runs" / f"task{t - 1}" if t else None, threads=args.threads, progress=False,
                         query_cache=out / "query", eval_out=d / "eval.json")
        state_mb = (d / "state.safetensors").stat().st_size / 2**20
        tasks.append({"task": t, "train_images": rec["train_images"], "steps": rec.get("train_batches"),
                      "seconds": rec["seconds"], "images_per_s": rec["images_per_s"],
                      "peak_memory_mb": rec["peak_memory_mb"], "state_mb": state_mb,
                      "state_share_of_350mb": state_mb / AUTHORS_CHECKPOINT_MB, "feature_cache": rec["feature_cache"],
                      "accuracy": json.loads((d / "eval.json").read_text())["accuracy"]})
    summary = {"model": args.model, "size": args.size, "batch": args.batch, "epochs": args.epochs,
               "device": str(rec.get("device", "")), "setup_s": setup_s, "tasks": tasks}
    (out / "paper_scale.json").write_text(json.dumps(summary, indent=1))
    for r in tasks:
        print(f"task {r['task']}: {r['train_images']} images x {args.epochs} epochs in {r['seconds']:.1f} s = "
              f"{r['images_per_s']:.0f} images/s; peak {r['peak_memory_mb']:.0f} MB; state {r['state_mb']:.2f} MB "
              f"({100 * r['state_share_of_350mb']:.2f} % of 350 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
