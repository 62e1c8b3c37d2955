"""Per-job time of the `train_task` jobs of a finished run, from Snakemake's benchmark files (issue 22).

    python tools/job_overhead.py [RESULTS_DIR]        # default: results/

For every `results/timings/train_task/<benchmark>/<method>/seed<k>/task<t>.tsv` with its task folder: the job's
wall time (the benchmark file's `s`), the training seconds (`train.json["seconds"]`), the evaluation seconds of
the R column (`eval.json["seconds"]`), and what is left: the job's non-training time without the evaluation.
Prints the mean, median, min and max of each over the jobs. Wall times depend on the load of the machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path


def job_times(results: Path) -> list[dict[str, float]]:
    rows = []
    for tsv in sorted((results / "timings" / "train_task").glob("*/*/seed*/task*.tsv")):
        benchmark, method, seed = tsv.parts[-4:-1]
        task = results / "runs" / benchmark / method / seed / tsv.stem
        if not (task / "train.json").exists() or not (task / "eval.json").exists():
            continue
        with tsv.open() as f:
            wall = float(next(csv.DictReader(f, delimiter="\t"))["s"])
        train = json.loads((task / "train.json").read_text())["seconds"]
        evaluation = json.loads((task / "eval.json").read_text())["seconds"]
        rows.append({"wall": wall, "train": train, "eval": evaluation, "other": wall - train - evaluation})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="?", type=Path, default=Path("results"), help="the results folder")
    results = parser.parse_args().results
    rows = job_times(results)
    if not rows:
        raise SystemExit(f"no train_task benchmark files with their task folders under {results}")
    print(f"{len(rows)} train_task jobs under {results}")
    print(f"{'seconds':40s} {'mean':>7s} {'median':>7s} {'min':>7s} {'max':>7s}")
    for key, label in (("wall", "job wall (benchmark file)"), ("train", "training (train.json)"),
                       ("eval", "R-column evaluation (eval.json)"),
                       ("other", "the rest: wall - training - evaluation")):
        v = [r[key] for r in rows]
        print(f"{label:40s} {statistics.mean(v):7.2f} {statistics.median(v):7.2f} {min(v):7.2f} {max(v):7.2f}")


if __name__ == "__main__":
    main()
