"""Throughput of the image-benchmark data path: prepare_data (images/s decoded and stored) and the fast
loader (images/s delivered as float batches on the device, augmentation included).

    # prepare an ImageNet-R-layout tree with your own lists, at the protocol's 224 px, over N cores
    python tools/bench_image_data.py prepare --root /data/imagenet-r --split /data/lists --out /scratch/bench \
        --workers 2
    # the loader over the prepared benchmark's first task, batch 64, a few epochs
    python tools/bench_image_data.py loader --manifest /scratch/bench/manifest.json --epochs 2

    # the split check (normalised paths, content hashes) on a synthetic ImageNet-R tree of 30,000 images,
    # then the refusal of a test list repeating a training image in each spelling, and of a byte-identical copy
    python tools/bench_image_data.py split-check --out /tmp/split_tree --images 30000

Run with `PYTHONPATH=src` from the repository root (or with the package installed).
"""

from __future__ import annotations

import argparse
import json
import time


def bench_prepare(args: argparse.Namespace) -> dict:
    from intact.data import benchmark_class, benchmark_settings

    cfg = benchmark_settings({"name": "bench", "type": args.type, "backbone": "none", "root": args.root,
                              "split": args.split, "image_size": args.image_size,
                              **({"domains": args.domains} if args.domains else {})})
    t0 = time.perf_counter()
    manifest = benchmark_class(cfg.type).prepare(cfg, args.out, workers=args.workers)
    seconds = time.perf_counter() - t0
    m = json.loads(manifest.read_text())
    n = m["train_images"] + m["test_images"]
    return {"what": "prepare", "images": n, "seconds": seconds, "images_per_s": n / seconds, "workers": args.workers,
            "bytes": m["bytes"], "image_size": args.image_size}


def bench_loader(args: argparse.Namespace) -> dict:
    import torch

    from intact.data import open_benchmark
    from intact.data.loader import train_batches

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bench = open_benchmark(args.manifest)
    data = bench.train_set(args.task)
    n, t0, shape = 0, time.perf_counter(), None
    for epoch in range(args.epochs):
        for x, y in train_batches(data, seed=0, task=args.task, epoch=epoch, batch_size=args.batch_size, device=device):
            n, shape = n + len(y), list(x.shape)
        if device.type == "cuda":
            torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"what": "loader", "images": n, "seconds": seconds, "images_per_s": n / seconds, "device": str(device),
            "batch_size": args.batch_size, "image_size": bench.image_size, "shape": shape,
            "threads": torch.get_num_threads()}


def bench_split_check(args: argparse.Namespace) -> dict:
    import shutil
    import sys
    from pathlib import Path

    from intact.data.imagenet_r import r_lists
    from intact.data.split_lists import SplitError, check_split

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import image_trees

    out = Path(args.out)
    domains = [f"d{i:02d}" for i in range(15)]
    per_class = args.images // (len(image_trees.WNIDS) * len(domains))
    t0 = time.perf_counter()
    if not (out / "lists" / "train.txt").is_file():
        image_trees.imagenet_r(out / "root", out / "lists", domains, per_class=per_class)
    made = time.perf_counter() - t0

    def check(lists: Path) -> tuple[float, str]:
        start = time.perf_counter()
        try:
            check_split(r_lists(str(lists), str(out / "root"), tuple(domains))[0], 200)
            outcome = "passed"
        except SplitError as e:
            outcome = str(e)
        return time.perf_counter() - start, outcome

    seconds, outcome = check(out / "lists")
    train = (out / "lists" / "train.txt").read_text()
    rel, label = train.splitlines()[0].split()
    folder, name = rel.split("/")
    copy = rel.replace(".jpg", "_copy.jpg")
    shutil.copy(out / "root" / rel, out / "root" / copy)
    refusals = {}
    for spelled in (f"{folder}//{name}", f"{folder}/./{name}", f"{folder}/../{folder}/{name}", f"./{rel}",
                    str(out / "root" / rel), copy):
        lists = out / "lists_bad"
        lists.mkdir(exist_ok=True)
        (lists / "train.txt").write_text(train)
        (lists / "test.txt").write_text((out / "lists" / "test.txt").read_text() + f"{spelled} {label}\n")
        refusals[spelled] = dict(zip(("seconds", "outcome"), check(lists)))
    images = len(train.splitlines()) + len((out / "lists" / "test.txt").read_text().splitlines())
    return {"what": "split-check", "images": images, "tree_seconds": made, "check_seconds": seconds, "outcome": outcome,
            "refusals": refusals}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--type", default="imagenet_r")
    p.add_argument("--root", required=True)
    p.add_argument("--split", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--domains", nargs="*")
    p.set_defaults(fn=bench_prepare)
    q = sub.add_parser("loader")
    q.add_argument("--manifest", required=True)
    q.add_argument("--task", type=int, default=0)
    q.add_argument("--epochs", type=int, default=2)
    q.add_argument("--batch-size", type=int, default=64)
    q.add_argument("--threads", type=int, default=None)
    q.set_defaults(fn=bench_loader)
    c = sub.add_parser("split-check")
    c.add_argument("--out", required=True)
    c.add_argument("--images", type=int, default=30000)
    c.set_defaults(fn=bench_split_check)
    args = ap.parse_args()
    print(json.dumps(args.fn(args), indent=2))


if __name__ == "__main__":
    main()
