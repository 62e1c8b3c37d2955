"""Print the head certificate's width next to the worst drift found (issue 17, item 10; issue 24).

    PYTHONPATH=src python tools/certificate_width.py            # interval vs CROWN on docs/protocols.md's heads
    PYTHONPATH=src python tools/certificate_width.py --seeds 5 --relative 0.1
    # the 48 cases of docs/certificate.md: interval, CROWN, optimised slopes, the certificate, the attack
    # (PGD 64 restarts x 300 steps by default, 20,000 samples, 5,000 corners), the certificate with the slopes
    # optimised 200 iterations ("long"), and auto_LiRPA's alpha-CROWN at 20 and 200 iterations if given
    PYTHONPATH=src python tools/certificate_width.py --alpha --lirpa lirpa.jsonl --rows rows.jsonl

Each row: a random Linear-(Leaky)ReLU head, every parameter moved by ``--relative`` times its norm, on a
random box (src/intact/experiments/certificate_width.py). CPU only. ``--lirpa``: the JSON lines of
``tools/certificate_lirpa.py`` (run in a virtualenv with auto_LiRPA; install steps:
docs/log/2026-11-27-certificate-alpha-crown-200.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from intact.cli import existing_file
from intact.experiments.certificate_width import HEADS_ALPHA, RELATIVES, SEEDS, compare, measure

HEADS = ([64, 128, 10], [64, 128, 128, 10], [256, 256, 50], [256, 256, 256, 50])


def crown_table(seeds: int, relative: float) -> None:
    print("| head | seeds | interval | CROWN | interval / CROWN | CROWN / ascent | interval / ascent | sampled / "
          "ascent |")
    print("|---|---|---|---|---|---|---|---|")
    for dims in HEADS:
        rows = [measure(list(dims), relative=relative, seed=s) for s in range(seeds)]
        mean = lambda k: statistics.mean(r[k] for r in rows)  # noqa: E731, B023 (used in this iteration)
        worst = lambda k: max(r[k] for r in rows)  # noqa: E731, B023 (used in this iteration)
        print(f"| {'-'.join(map(str, dims))} | {len(rows)} | {mean('interval'):.3g} | {mean('crown'):.3g} | "
              f"{mean('interval_over_crown'):.2f} (max {worst('interval_over_crown'):.2f}) | "
              f"{mean('crown_over_ascent'):.2f} (max {worst('crown_over_ascent'):.2f}) | "
              f"{mean('interval_over_ascent'):.2f} (max {worst('interval_over_ascent'):.2f}) | "
              f"{statistics.mean(r['sampled'] / r['ascent'] for r in rows):.2f} |")


def _key(r: dict) -> tuple:
    return tuple(r["dims"]), r["relative"], r["seed"]


#: auto_LiRPA's alpha-CROWN settings (tools/certificate_lirpa.py), each compared with the certificate
LIRPA = {"lirpa_alpha": "20 iterations, lr 0.5", "lirpa_alpha200": "200 iterations, lr 0.5",
         "lirpa_alpha200_lr01": "200 iterations, lr 0.1", "lirpa_alpha200_best": "200 iterations, the better lr"}


def _rows(lirpa: Path | None, rows_out: Path | None, restarts: int, steps: int, stored: Path | None) -> list[dict]:
    """The 48 cases: computed (appended to ``rows_out`` as they finish) or read from ``stored``, with auto_LiRPA's."""
    theirs = {_key(r): r for r in map(json.loads, lirpa.read_text().splitlines())} if lirpa else {}
    for r in theirs.values():
        if "lirpa_alpha200" in r:
            r["lirpa_alpha200_best"] = min(r["lirpa_alpha200"], r["lirpa_alpha200_lr01"])
    if stored:
        return [{**r, **theirs.get(_key(r), {})} for r in map(json.loads, stored.read_text().splitlines())]
    rows = []
    for dims in HEADS_ALPHA:
        for relative in RELATIVES:
            for seed in SEEDS:
                r = compare(list(dims), relative, seed, restarts, steps, long=True)
                rows.append({**r, **theirs.get(_key(r), {})})
                if rows_out:
                    with rows_out.open("a") as f:
                        f.write(json.dumps(r) + "\n")
    return rows


def summary(rows: list[dict]) -> list[str]:
    """Per auto_LiRPA setting and per certificate (training's and the long optimisation's): the largest ratio
    certificate / alpha-CROWN, and in how many cases it is above 1 (looser) and above 1.001."""
    out = []
    for theirs, label in LIRPA.items():
        for ours in ("certificate", "certificate_long"):
            ratio = [r[ours] / r[theirs] for r in rows if theirs in r and ours in r]
            if ratio:
                out.append(f"- {ours} / auto_LiRPA alpha-CROWN ({label}): max {max(ratio):.5f}, looser in "
                           f"{sum(x > 1 for x in ratio)} of {len(ratio)}, by more than 0.1 % in "
                           f"{sum(x > 1.001 for x in ratio)}")
    return out


def alpha_table(lirpa: Path | None, rows_out: Path | None, restarts: int, steps: int,
                stored: Path | None = None) -> None:
    """The 48-case table; ``stored``: render the rows a previous run appended to ``--rows`` instead of computing."""
    rows = _rows(lirpa, rows_out, restarts, steps, stored)
    print("| head | update | interval | CROWN | α (ours) | certificate | attack | cert / attack | LiRPA CROWN | "
          "LiRPA α 20 | LiRPA α 200 | cert / α 20 (max) | cert / α 200 (max) | long / α 200 (max) | "
          "cert CPU s (max) | long CPU s (max) |")
    print("|" + "---|" * 16)
    for dims in HEADS_ALPHA:
        for relative in RELATIVES:
            sub = [r for r in rows if r["dims"] == list(dims) and r["relative"] == relative]
            if not sub:     # a stored run cut short
                continue
            mean = lambda k: statistics.mean(r[k] for r in sub)  # noqa: E731, B023 (used in this iteration)
            ratio = lambda a, b: [r[a] / r[b] for r in sub]  # noqa: E731, B023 (used in this iteration)
            pair = lambda x: f"{statistics.mean(x):.5f} ({max(x):.5f})"  # noqa: E731
            cells = [f"{mean(k):.4g}" for k in ("interval", "crown", "alpha", "certificate", "attack")]
            cells.append(f"{mean('certificate') / mean('attack'):.2f}")
            if all("lirpa_alpha200_best" in r for r in sub):
                cells += [f"{mean(k):.4g}" for k in ("lirpa_crown", "lirpa_alpha", "lirpa_alpha200_best")]
                cells += [pair(ratio("certificate", "lirpa_alpha")), pair(ratio("certificate", "lirpa_alpha200_best")),
                          pair(ratio("certificate_long", "lirpa_alpha200_best"))]
            else:
                cells += ["-"] * 6
            cells += [f"{mean(k):.2f} ({max(r[k] for r in sub):.2f})" for k in ("cpu_seconds", "cpu_seconds_long")]
            print(f"| {'-'.join(map(str, dims))} | {relative:g} | " + " | ".join(cells) + " |")
    print()
    print("\n".join(summary(rows)))
    print(f"- load average (1 min) during the certificates: {min(r['load'] for r in rows):.1f} to "
          f"{max(r['load'] for r in rows):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--relative", type=float, default=0.3)
    ap.add_argument("--alpha", action="store_true", help="the 48 cases of docs/certificate.md (issue 24)")
    ap.add_argument("--lirpa", type=existing_file, help="tools/certificate_lirpa.py's JSON lines, for --alpha")
    ap.add_argument("--rows", type=Path, help="append every --alpha case as a JSON line here")
    ap.add_argument("--restarts", type=int, default=64, help="PGD restarts per output and sign, for --alpha")
    ap.add_argument("--steps", type=int, default=300, help="PGD steps, for --alpha")
    ap.add_argument("--stored", type=existing_file, help="render the --alpha table from a previous run's --rows "
                    "file (implies --alpha)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (small matrices: 1 is fastest)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.alpha or args.stored:
        alpha_table(args.lirpa, args.rows, args.restarts, args.steps, args.stored)
    else:
        crown_table(args.seeds, args.relative)


if __name__ == "__main__":
    main()
