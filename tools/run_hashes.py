"""Print the config hash of every run name that config.yaml and the shipped overlays declare, one line per
(config, benchmark, method): the table ``tests/data/run_hashes.tsv`` (``tests/test_run_hashes.py`` recomputes it).

Each overlay (``configs/paper/*.yaml``, ``configs/lambda_search.yaml``) is layered over config.yaml as
``snakemake --configfile <overlay>`` layers it (``intact.layering.read_files``). The runs: the default run's and
every study's on ``run.benchmarks``; the tune study's search points (validation split), their final runs (test
split: whichever point a choice picks) and baselines on the tune's benchmarks; and the network family on digits.
Every run at the config's first ``run.seeds`` (the seed enters the hash: one seed keeps one row per name). The
output is sorted, with a header line.

Usage: PYTHONPATH=src python tools/run_hashes.py [config.yaml | overlay.yaml ...] > tests/data/run_hashes.tsv
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from intact.checks import declared_runs
from intact.cli import existing_file
from intact.config import resolve_run
from intact.settings import RunConfig
from intact.layering import read_files
from intact.tune import expand_tune

BASE = "config.yaml"
HEADER = ("config", "benchmark", "method", "hash")
EXTRA = ["net_finetune", "net_finetune+intact", "net_ewc", "net_lwf",
         "net_finetune+intact@methods.net_finetune.model=cnn_bn,methods.net_finetune.feature=conv1"]


def default_paths(root: Path) -> list[str]:
    """config.yaml and the overlays it ships, relative to ``root`` (the checkout)."""
    paper = sorted(p.relative_to(root).as_posix() for p in (root / "configs/paper").glob("*.yaml")
                   if p.name != "base.yaml")
    return [BASE, *paper, "configs/lambda_search.yaml"]


def runs(cfg: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(benchmark, method name) of every run ``cfg`` declares (the module docstring says which)."""
    for b in cfg["run"]["benchmarks"]:
        for _, m in declared_runs(cfg):
            yield b, m
    tune = expand_tune(cfg)
    for b in tune.benchmarks if tune is not None else ():
        for search in tune.searches:
            yield from ((b, m) for m in [*search.val_names, *search.test_names, *filter(None, [search.baseline])])
    if "digits" in cfg["run"]["benchmarks"]:
        yield from (("digits", m) for m in EXTRA)


def resolved_runs(path: str, root: Path) -> dict[tuple[str, str], RunConfig]:
    """(benchmark, method name) -> the resolved run, at the first seed, of every run one config declares (``path``
    relative to ``root``; config.yaml alone, or an overlay over it)."""
    files = [root / path] if path == BASE else [root / BASE, root / path]
    cfg = read_files(files)
    seed = cfg["run"]["seeds"][0]
    return {(b, m): resolve_run(cfg, b, m, seed) for b, m in dict.fromkeys(runs(cfg))}


def rows(path: str, root: Path) -> list[tuple[str, str, str, str]]:
    """The table's rows of one config."""
    return sorted((path, b, m, run.hash()) for (b, m), run in resolved_runs(path, root).items())


def table(root: Path, paths: list[str] | None = None) -> list[tuple[str, str, str, str]]:
    """Every row of every config, sorted."""
    return sorted(row for path in (paths or default_paths(root)) for row in rows(path, root))


def main(paths: list[str]) -> None:
    print("\t".join(HEADER))
    for row in table(Path.cwd(), paths or None):
        print("\t".join(row))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=existing_file,
                        help="configs relative to the checkout (default: config.yaml and every shipped overlay)")
    main([str(path) for path in parser.parse_args().paths])
