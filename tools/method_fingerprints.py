"""Train tasks 0..T-1 (T = $INTACT_FP_TASKS, default 2; 3 = every task) of several methods on a tiny digits
benchmark; print each run's config hash, a hash of its last state, its last epoch record (loss terms), its
train.json keys and its R matrix (one row per trained task: accuracy on every task) - to compare two
versions of the code bit for bit (a refactoring must print the same JSON).

Usage: PYTHONPATH=<tree>/src [INTACT_CONFIG=<tree>/config.yaml] [INTACT_FP_TASKS=3] \
       python tools/method_fingerprints.py BENCH_DIR OUT_DIR METHOD...
(BENCH_DIR: prepared data + backbone, built on first use; share it between the two versions.)
"""
import argparse
import hashlib
import json
import os
from pathlib import Path

from safetensors.torch import load_file

from intact.config import backbone_config, benchmark_config, resolve_run
from intact.data import benchmark_class
from intact.layering import read_files
from intact.pretrain import pretrain_backbone
from intact.train import train_task

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("bench_dir", type=Path)
parser.add_argument("out_dir", type=Path)
parser.add_argument("methods", nargs="+", metavar="METHOD")
args = parser.parse_args()
root, out = args.bench_dir, args.out_dir
cfg = read_files([os.environ.get("INTACT_CONFIG", "config.yaml")])
cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise", "edges"]
cfg["backbones"]["vit_digits"]["pretrain"]["epochs"] = 3
cfg["optim"]["epochs"] = 1
cfg.setdefault("methods", {}).setdefault("coda_p", {})["pool_size"] = 6
cfg["run"]["methods"], cfg["run"]["seeds"] = ["coda_p"], [0]

manifest, weights = root / "data/manifest.json", root / "backbone.safetensors"
if not weights.exists():
    b = benchmark_config(cfg, "digits")
    manifest = benchmark_class(b.type).prepare(b, root / "data")
    pretrain_backbone(backbone_config(cfg, "vit_digits"), manifest, weights, root / "backbone.json", threads=1,
                      progress=False)
res = {}
for m in args.methods:
    run = resolve_run(cfg, "digits", m, 0)
    prev, R = None, []
    for t in range(int(os.environ.get("INTACT_FP_TASKS", "2"))):
        d = out / m / f"task{t}"
        rec = train_task(run, t, manifest=manifest, backbone_weights=weights, out_dir=d, prev_dir=prev, threads=1,
                         progress=False,
                         eval_out=d / "eval.json")
        R.append(json.loads((d / "eval.json").read_text())["accuracy"])
        prev = d
    st = load_file(str(d / "state.safetensors"))
    h = hashlib.sha256()
    for k in sorted(st):
        h.update(k.encode())
        h.update(st[k].numpy().tobytes())
    ep = {k: v for k, v in rec["epochs"][0].items() if k not in ("seconds", "images_per_s")}
    res[m] = {"hash": run.hash(), "state": h.hexdigest()[:16], "epoch": ep, "R": R,
              "keys": [k for k in rec if k not in ("seconds", "images_per_s", "peak_memory_mb",
                                                   "inference_batch_seconds", "provenance")]}
print(json.dumps(res, indent=1, sort_keys=True))
