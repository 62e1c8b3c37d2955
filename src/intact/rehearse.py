"""``intact rehearse``: run a paper config's dress rehearsal (:mod:`intact.rehearsal`) end to end and read every
output it wrote.

::

    intact rehearse                              # all four paper configs, each in rehearsal/<name>/
    intact rehearse imagenet_r -- --profile slurm   # one, its jobs on the cluster (any snakemake options after --)

Each config runs ``snakemake full`` with ``configs/paper/<name>.yaml`` and ``configs/rehearsal.yaml`` in its own
working directory, then :func:`check_outputs` reads what it wrote: every file of target ``full`` is there, every
paper table has a value with its interval in every cell whose runs the config declares, no table holds a NaN, a
``—`` that it does not explain or a row without a value, and every table says it is a rehearsal. A line per config
gives its job count and time. No torch here.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import pandas as pd

from intact.config import load_config
from intact.plan import PAPER_TABLES, TUNE_REPORT, Plan, paper_table_file
from intact.rehearsal import BANNER

PAPER_CONFIGS = ("imagenet_r", "domainnet", "imagenet_c", "imagenet_mix")
#: per paper table, the columns every row of a declared run must fill: (value, its interval's lower end)
FILLED = {"main": ("here_mean", "here_ci_low"), "integration": ("here_mean", "here_ci_low"),
          "ablation": ("here_mean", "here_ci_low"), "efficiency": ("here_aa", "here_aa_ci_low")}


def config_files(checkout: Path, name: str) -> list[Path]:
    """config.yaml, the paper config and the rehearsal overlay, as ``snakemake --configfile`` layers them."""
    configs = checkout / "configs"
    return [checkout / "config.yaml", configs / "paper" / f"{name}.yaml", configs / "rehearsal.yaml"]


def check_outputs(workdir: Path, cfg: Mapping[str, Any]) -> list[str]:
    """Every problem with what a rehearsal of ``cfg`` wrote under ``workdir`` (empty: none): a missing file of target
    ``full``, a paper-table cell of a declared run without its value or interval, a NaN, a ``—`` nothing explains, a
    row with no value, a table that does not say it is a rehearsal."""
    plan, problems = Plan(cfg), []
    tune = [f.format(benchmark=b) for b in (plan.tune.benchmarks if plan.tune else ()) for f in TUNE_REPORT.values()]
    for f in [*plan.full_targets(), *plan.tune_choices(), *tune]:
        if not (workdir / f).is_file():
            problems.append(f"missing: {f}")
    for name in PAPER_TABLES:
        problems += _table_problems(workdir, name, plan)
    for md in sorted((workdir / "results" / "tables").rglob("*.md")):
        text = md.read_text()
        if not text.startswith(f"**{BANNER}**"):
            problems.append(f"{md.relative_to(workdir)}: does not say it is a rehearsal")
        own = md.parent.name != "paper"   # a table of this config's runs only (a paper table shows the paper's too)
        problems += [f"{md.relative_to(workdir)}: {p}" for p in markdown_problems(text, own)]
    return problems


def markdown_problems(text: str, own: bool) -> list[str]:
    """A NaN or Inf cell, a ``—`` or ``n/a`` that no line under the tables explains and, in a table of the config's
    own runs (``own``: every row is a declared run), a row with no value (all ``—`` after its label) in one Markdown
    file."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not line.startswith("|:") and not line.startswith("|-")]
    cells = {c.lower() for row in rows for c in row}
    problems = ["holds a NaN or Inf cell"] if cells & {"nan", "inf", "-inf"} else []
    notes = [line for line in text.splitlines() if not line.startswith("|")]
    problems += [f"shows {mark} without saying what it means" for mark in ("—", "n/a")
                 if mark in cells and not any(mark in line for line in notes)]
    problems += [f"row {row[0]!r} has no value" for row in rows if own and len(row) > 1 and set(row[1:]) == {"—"}]
    return problems


def _table_problems(workdir: Path, name: str, plan: Plan) -> list[str]:
    path = workdir / paper_table_file(name, "csv")
    if not path.is_file():
        return []  # named as missing above
    data = pd.read_csv(path)
    if "rehearsal" not in data.columns:
        return [f"{path.relative_to(workdir)}: has no rehearsal column"]
    if name not in FILLED:
        return []
    declared = plan.declared_runs()
    problems = []
    value, low = FILLED[name]
    for _, row in data.iterrows():
        run, b = row.get("run"), row["benchmark"]
        if not isinstance(run, str) or run not in declared.get(b, {}):
            continue
        if _empty(row[value]) or (len(declared[b][run]) >= 2 and _empty(row[low])):
            problems.append(f"{path.relative_to(workdir)}: row {row.get('method', row.get('removed'))!r} (run {run!r} "
                            f"on {b}) has no value or no interval")
    return problems


def _empty(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def rehearse(checkout: Path, name: str, root: Path, snakemake_args: Sequence[str]) -> tuple[int, list[str]]:
    """Rehearse paper config ``name`` in ``root/<name>``: (its job count, the problems :func:`check_outputs` found);
    a failed workflow is a problem of its own."""
    workdir = root / name
    workdir.mkdir(parents=True, exist_ok=True)
    link = workdir / "config.yaml"   # the Snakefile's configfile, read in the working directory
    if not link.exists():
        link.symlink_to((checkout / "config.yaml").resolve())
    files = config_files(checkout, name)
    cmd = [sys.executable, "-m", "snakemake", "full", "-s", str(checkout / "Snakefile"), "-d", str(workdir),
           "--configfile", *map(str, files[1:]), *snakemake_args]
    log = workdir / "rehearsal.log"
    with log.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    text = log.read_text()
    jobs = text.count("Finished jobid")
    if proc.returncode != 0:
        tail = "\n".join(text.splitlines()[-30:])
        return jobs, [f"snakemake failed ({proc.returncode}); the end of {log}:\n{tail}"]
    return jobs, check_outputs(workdir, load_config(*map(str, files), check_files=False))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="intact rehearse", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", help=f"paper configs to rehearse: {', '.join(PAPER_CONFIGS)} (default: "
                                                   "all four)")
    parser.add_argument("--root", type=Path, default=Path("rehearsal"), help="working directories (default: "
                        "rehearsal/)")
    parser.add_argument("--checkout", type=Path, default=Path.cwd(), help="the checkout with the Snakefile "
                        "(default: .)")
    argv = list(argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    unknown = sorted(set(args.configs) - set(PAPER_CONFIGS))
    if unknown:
        parser.error(f"unknown paper config(s) {', '.join(unknown)}; expected {', '.join(PAPER_CONFIGS)}")
    failed = 0
    for name in args.configs or PAPER_CONFIGS:
        t0 = time.perf_counter()
        jobs, problems = rehearse(args.checkout.resolve(), name, args.root.resolve(), extra)
        status = "ok" if not problems else f"{len(problems)} problem(s)"
        print(f"rehearsal {name}: {status}, {jobs} jobs, {time.perf_counter() - t0:.0f} s ({args.root / name})",
              flush=True)
        for p in problems[:20]:
            print(f"  {p}", flush=True)
        failed += bool(problems)
    return 1 if failed else 0
