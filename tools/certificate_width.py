"""Print the head certificate's width next to the worst drift found (issue 17, item 10; issue 24).

    PYTHONPATH=src python tools/certificate_width.py            # interval vs CROWN on docs/protocols.md's heads
    PYTHONPATH=src python tools/certificate_width.py --seeds 5 --relative 0.1
    # the 48 cases of docs/certificate.md: interval, CROWN, optimised slopes, the certificate, the attack
    # (PGD 64 restarts x 300 steps by default, 20,000 samples, 5,000 corners) and auto_LiRPA's figures if given
    PYTHONPATH=src python tools/certificate_width.py --alpha --lirpa lirpa.jsonl --rows rows.jsonl

Each row: a random Linear-(Leaky)ReLU head, every parameter moved by ``--relative`` times its norm, on a
random box (src/intact/experiments/certificate_width.py). CPU only. ``--lirpa``: the JSON lines of
``tools/certificate_lirpa.py`` (run in a virtualenv with auto_LiRPA; see docs/certificate.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from intact.experiments.certificate_width import HEADS_ALPHA, RELATIVES, SEEDS, compare, measure

HEADS = ([64, 128, 10], [64, 128, 128, 10], [256, 256, 50], [256, 256, 256, 50])


def crown_table(seeds: int, relative: float) -> None:
    print("| head | seeds | interval | CROWN | interval / CROWN | CROWN / ascent | interval / ascent | sampled / ascent |")
    print("|---|---|---|---|---|---|---|---|")
    for dims in HEADS:
        rows = [measure(list(dims), relative=relative, seed=s) for s in range(seeds)]
        mean = lambda k: statistics.mean(r[k] for r in rows)  # noqa: E731
        worst = lambda k: max(r[k] for r in rows)  # noqa: E731
        print(f"| {'-'.join(map(str, dims))} | {len(rows)} | {mean('interval'):.3g} | {mean('crown'):.3g} | "
              f"{mean('interval_over_crown'):.2f} (max {worst('interval_over_crown'):.2f}) | "
              f"{mean('crown_over_ascent'):.2f} (max {worst('crown_over_ascent'):.2f}) | "
              f"{mean('interval_over_ascent'):.2f} (max {worst('interval_over_ascent'):.2f}) | "
              f"{statistics.mean(r['sampled'] / r['ascent'] for r in rows):.2f} |")


def _key(r: dict) -> tuple:
    return tuple(r["dims"]), r["relative"], r["seed"]


def alpha_table(lirpa: Path | None, rows_out: Path | None, restarts: int, steps: int, stored: Path | None = None) -> None:
    """The 48-case table; ``stored``: render the rows a previous run appended to ``--rows`` instead of computing."""
    theirs = {_key(r): r for r in map(json.loads, lirpa.read_text().splitlines())} if lirpa else {}
    if stored:
        rows = [{**r, **theirs.get(_key(r), {})} for r in map(json.loads, stored.read_text().splitlines())]
    else:
        rows = []
        for dims in HEADS_ALPHA:
            for relative in RELATIVES:
                for seed in SEEDS:
                    r = {**compare(list(dims), relative, seed, restarts, steps), **theirs.get((tuple(dims), relative, seed), {})}
                    rows.append(r)
                    if rows_out:
                        with rows_out.open("a") as f:
                            f.write(json.dumps(r) + "\n")
    print("| head | update | interval | CROWN | α (ours) | certificate | attack | cert / attack | "
          "LiRPA CROWN | LiRPA α-CROWN | cert / LiRPA α (max) | cert s (max) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dims in HEADS_ALPHA:
        for relative in RELATIVES:
            sub = [r for r in rows if r["dims"] == list(dims) and r["relative"] == relative]
            mean = lambda k: statistics.mean(r[k] for r in sub)  # noqa: E731
            has = all("lirpa_alpha" in r for r in sub)
            ratio = [r["certificate"] / r["lirpa_alpha"] for r in sub] if has else []
            print(f"| {'-'.join(map(str, dims))} | {relative:g} | {mean('interval'):.4g} | {mean('crown'):.4g} | "
                  f"{mean('alpha'):.4g} | {mean('certificate'):.4g} | {mean('attack'):.4g} | "
                  f"{mean('certificate') / mean('attack'):.2f} | "
                  + (f"{mean('lirpa_crown'):.4g} | {mean('lirpa_alpha'):.4g} | {statistics.mean(ratio):.3f} ({max(ratio):.3f}) | "
                     if has else "- | - | - | ")
                  + f"{mean('seconds'):.2f} ({max(r['seconds'] for r in sub):.2f}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--relative", type=float, default=0.3)
    ap.add_argument("--alpha", action="store_true", help="the 48 cases of docs/certificate.md (issue 24)")
    ap.add_argument("--lirpa", type=Path, help="tools/certificate_lirpa.py's JSON lines, for --alpha")
    ap.add_argument("--rows", type=Path, help="append every --alpha case as a JSON line here")
    ap.add_argument("--restarts", type=int, default=64, help="PGD restarts per output and sign, for --alpha")
    ap.add_argument("--steps", type=int, default=300, help="PGD steps, for --alpha")
    ap.add_argument("--stored", type=Path, help="render the table from a previous run's --rows file")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (small matrices: 1 is fastest)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.alpha:
        alpha_table(args.lirpa, args.rows, args.restarts, args.steps, args.stored)
    else:
        crown_table(args.seeds, args.relative)


if __name__ == "__main__":
    main()
