"""``intact`` command line: check a config and list the runs it declares (no torch import).

    intact validate [config.yaml]     # schema + consistency check, the same one the Snakefile runs
    intact runs [config.yaml]         # every (benchmark, method, seed) of the default run and the studies
    intact speed [--model M --batch B --device D --pairs --json FILE]   # step cost of coda_p(+intact), caches on/off
"""

from __future__ import annotations

import argparse
import sys

from intact.config import ConfigError, load_config, resolve_run
from intact.studies import expand_studies
from intact.tune import expand_tune


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="intact", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (("validate", "check a config file"), ("runs", "list the runs a config declares")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("config", nargs="?", default="config.yaml")
    speed = sub.add_parser("speed", help="time training steps of coda_p / coda_p+intact (see intact.speed)")
    from intact.speed_args import add_arguments

    add_arguments(speed)
    args = parser.parse_args(argv)
    if args.command == "speed":
        from intact.speed import run_speed  # imports torch: only for this command

        return run_speed(args)
    try:
        cfg = load_config(args.config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "validate":
        print(f"{args.config}: valid")
        return 0
    everywhere = tuple(cfg["run"]["benchmarks"])
    groups = {"run (default target)": (cfg["run"]["methods"], cfg["run"]["seeds"], everywhere)}
    groups.update({f"study {n}": (s.methods, s.seeds, everywhere) for n, s in expand_studies(cfg).items()})
    tune = expand_tune(cfg)
    if tune is not None:  # the final runs follow the choices (results/tune/<benchmark>/<run>/choice.json)
        groups["study tune: search points (validation split)"] = (list(tune.search_runs()), tune.selection_seeds, tune.benchmarks)
        groups["study tune: baselines (test split)"] = (list(tune.baseline_runs()), tune.seeds, tune.benchmarks)
    for title, (methods, seeds, benchmarks) in groups.items():
        print(f"# {title}: {len(methods)} methods x {len(seeds)} seeds")
        for b in benchmarks:
            for m in methods:
                print(f"{b}\t{m}\tseeds={','.join(map(str, seeds))}\thash={resolve_run(cfg, b, m, seeds[0]).hash()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
