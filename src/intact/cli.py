"""``intact`` command line: check a config and list the runs it declares (no torch import but for a weights file).

    intact validate [--target T] [config.yaml ...]   # the Snakefile's start-up check of the config (schema, names,
                                       # every run resolved), and the weights files and data roots the runs of
                                       # target T (default: all) read; prepared data (results/data/<b>) needs no root;
                                       # each weights file's header: does it fit its model (torch on the meta device)
    intact runs [config.yaml ...]      # every (benchmark, method, seed) of the default run and the studies, with
                                       # what each trains with (protocol, backbone, epochs, batch, optimizer, ...)
    intact speed [--model M --batch B --device D --pairs --json FILE]   # step cost of coda_p(+intact), caches on/off
    intact warm [--checkout DIR]       # keep a warm parent for many local runs: prints `export INTACT_WARM_SOCKET=...`
    intact migrate [--dry-run] [results]   # rename a results tree written by version 0.1 to 0.2.0's method names
    intact rehearse [imagenet_r ...] [-- snakemake options]   # a paper config's whole DAG at toy scale, every output
                                       # read (intact.rehearse): before spending GPU time

Several files are layered in order, as Snakemake layers them: ``intact validate config.yaml overlay.yaml``
checks what ``snakemake --configfile overlay.yaml`` runs (the Snakefile's ``configfile`` is config.yaml).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from intact.runtime.joblog import show_deprecations

show_deprecations()  # before the imports that load the plugins: a plugin's deprecations are printed

from intact.config import ConfigError, load_config, resolve_run  # noqa: E402
from intact.plan import check_target_files  # noqa: E402
from intact.protocols import training_summary  # noqa: E402
from intact.studies import expand_studies  # noqa: E402
from intact.tune import expand_tune  # noqa: E402


def existing_file(text: str) -> Path:
    """An argparse ``type`` for a file argument (the tools' configs, lists and tables): a missing file is a one-line
    usage error naming the argument, exit 2, not a traceback from wherever the file is first read."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return Path(text)


def _parser() -> argparse.ArgumentParser:
    """The commands parsed here (speed, warm and rehearse parse their own options)."""
    parser = argparse.ArgumentParser(prog="intact", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (("validate", "check a config file"), ("runs", "list the runs a config declares")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("config", nargs="*", default=["config.yaml"], help="config files, layered in order")
    migrate = sub.add_parser("migrate", help="rename a results tree written by 0.1 to 0.2.0's method names "
                             "(intact.migrate)")
    migrate.add_argument("results", nargs="?", default="results", help="the results folder (default: results)")
    migrate.add_argument("--dry-run", action="store_true", help="say what it would change, naming each renamed run "
                         "and tune folder, and change nothing")
    sub.choices["validate"].add_argument(
        "--target", default="all", help="check the weights and data files this workflow target reads (default: all; "
        "paper_tables, reports, study_toy and study_drift read none); the workflow refuses them when a job it runs "
        "needs them, so a target whose runs are finished needs none")
    sub.add_parser("speed", help="time training steps of coda_p / coda_p+intact (intact speed --help)", add_help=False)
    sub.add_parser("warm", help="keep a warm parent for this checkout's local runs (intact warm --help)",
                   add_help=False)
    sub.add_parser("rehearse", help="rehearse the paper configs at toy scale and read every output (intact rehearse "
                   "--help)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["warm"]:
        from intact.runtime.warm import keep

        return keep(argv[1:])
    if argv[:1] == ["rehearse"]:
        from intact.rehearse import main as rehearse

        return rehearse(argv[1:])
    if argv[:1] == ["speed"]:
        from intact.speed import main as speed  # imports torch: only for this command (its own options)

        return speed(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "migrate":
        return _migrate(args.results, args.dry_run)
    try:
        # the files are checked per target, as the workflow checks them (a dry run needs none)
        cfg = load_config(*args.config, check_files=False)
        if args.command == "validate":
            checked = check_target_files(cfg, args.target, lambda b: Path(f"results/data/{b}/manifest.json").is_file())
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "validate":
        print(f"{' <- '.join(args.config)}: valid ({checked})")
        return 0
    everywhere = tuple(cfg["run"]["benchmarks"])
    groups = {"run (default target)": (cfg["run"]["methods"], cfg["run"]["seeds"], everywhere)}
    groups.update({f"study {n}": (s.methods, s.seeds, everywhere) for n, s in expand_studies(cfg).items()})
    tune = expand_tune(cfg)
    if tune is not None:  # the final runs follow the choices (results/tune/<benchmark>/<run>/choice.json)
        groups["study tune: search points (validation split)"] = (list(tune.search_runs()), tune.selection_seeds,
                                                                  tune.benchmarks)
        groups["study tune: baselines (test split)"] = (list(tune.baseline_runs()), tune.seeds, tune.benchmarks)
    for title, (methods, seeds, benchmarks) in groups.items():
        print(f"# {title}: {len(methods)} methods x {len(seeds)} seeds")
        for b in benchmarks:
            for m in methods:
                run = resolve_run(cfg, b, m, seeds[0])
                training = "\t".join(f"{k}={v}" for k, v in training_summary(run).items())
                print(f"{b}\t{m}\tseeds={','.join(map(str, seeds))}\thash={run.hash()}\t{training}")
    return 0


def _migrate(results: str, dry_run: bool) -> int:
    from intact.migrate import MigrationRefused, migrate

    try:
        print(migrate(results, dry_run=dry_run))
    except MigrationRefused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
