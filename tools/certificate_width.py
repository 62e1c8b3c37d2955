"""Print the head certificate's width, interval vs CROWN, next to the worst drift found (issue 17, item 10).

    PYTHONPATH=src python tools/certificate_width.py            # the heads of docs/protocols.md's table
    PYTHONPATH=src python tools/certificate_width.py --seeds 5 --relative 0.1

Each row: a random Linear-LeakyReLU(0.01)-Linear(-LeakyReLU-Linear) head, every parameter moved by
``--relative`` times its norm, on a random box (src/intact/experiments/certificate_width.py). CPU only, seconds.
"""

from __future__ import annotations

import argparse
import statistics

from intact.experiments.certificate_width import measure

HEADS = ([64, 128, 10], [64, 128, 128, 10], [256, 256, 50], [256, 256, 256, 50])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--relative", type=float, default=0.3)
    args = ap.parse_args()
    print("| head | seeds | interval | CROWN | interval / CROWN | CROWN / ascent | interval / ascent | sampled / ascent |")
    print("|---|---|---|---|---|---|---|---|")
    for dims in HEADS:
        rows = [measure(list(dims), relative=args.relative, seed=s) for s in range(args.seeds)]
        mean = lambda k: statistics.mean(r[k] for r in rows)  # noqa: E731
        worst = lambda k: max(r[k] for r in rows)  # noqa: E731
        print(f"| {'-'.join(map(str, dims))} | {len(rows)} | {mean('interval'):.3g} | {mean('crown'):.3g} | "
              f"{mean('interval_over_crown'):.2f} (max {worst('interval_over_crown'):.2f}) | "
              f"{mean('crown_over_ascent'):.2f} (max {worst('crown_over_ascent'):.2f}) | "
              f"{mean('interval_over_ascent'):.2f} (max {worst('interval_over_ascent'):.2f}) | "
              f"{statistics.mean(r['sampled'] / r['ascent'] for r in rows):.2f} |")


if __name__ == "__main__":
    main()
