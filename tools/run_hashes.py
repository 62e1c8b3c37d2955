"""Print the config hash of every run name that config.yaml and configs/paper/*.yaml declare (plus the network
family), one line per (config, benchmark, method): compare the output before and after a refactoring.

Usage: PYTHONPATH=src python tools/run_hashes.py [config.yaml configs/paper/*.yaml]
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from intact.checks import declared_runs
from intact.config import resolve_run
from intact.layering import read_layers

EXTRA = ["net_finetune", "net_finetune+intact", "net_ewc", "net_lwf",
         "net_finetune+intact@methods.net_finetune.model=cnn_bn,methods.net_finetune.feature=conv1"]


def main(paths: list[str]) -> None:
    for path in paths:
        cfg = read_layers(path)  # `extends` resolved (configs/paper/*.yaml are overlays of base.yaml)
        if "benchmarks" not in cfg:  # an overlay (configs/lambda_search.yaml): over config.yaml, as snakemake merges
            base = yaml.safe_load(Path("config.yaml").read_text())
            cfg = {**base, **cfg, "run": {**base["run"], **cfg["run"]}}
        names = sorted({m for _, m in declared_runs(cfg)} | {m for m in cfg["run"]["methods"]})
        if "digits" in cfg["benchmarks"]:
            names += EXTRA
        for b in cfg["run"]["benchmarks"]:
            for m in names:
                run = resolve_run(cfg, b, m, cfg["run"]["seeds"][0])
                print(f"{path}\t{b}\t{m}\t{run.hash()}")


if __name__ == "__main__":
    paper = sorted(str(p) for p in Path("configs/paper").glob("*.yaml") if p.name != "base.yaml")
    main(sys.argv[1:] or ["config.yaml", *paper, "configs/lambda_search.yaml"])
