"""The options of ``intact speed`` (torch-free, so ``intact validate`` / ``runs`` stay light)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="vit_base_patch16_224", help="timm model name (random weights)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--repeats", type=int, default=5, help="timed steps per row (median, min and max are reported)")
    p.add_argument("--amp", choices=["on", "off"], default="on", help="bf16 autocast on CUDA (ignored on CPU)")
    p.add_argument("--classes", type=int, default=200)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--config", action="append", type=Path, default=None,
                   help="config files layered in order (default: config.yaml, configs/paper/imagenet_r.yaml)")
    p.add_argument("--benchmark", default=None, help="whose method settings (default: the config's first run benchmark)")
    p.add_argument("--methods", nargs="+", default=["coda_p", "coda_p+intact"])
    p.add_argument("--pairs", action="store_true",
                   help="build all rows, then time them in turn step by step: ratios that hold under changing load")
    p.add_argument("--json", type=Path, default=None, help="write {'results': [...], 'machine': ..., 'ratios': ...} here")
