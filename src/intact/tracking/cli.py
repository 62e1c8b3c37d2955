"""The command line ``python -m intact.tracking status|sync|track`` (see :mod:`intact.tracking`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from collections.abc import Sequence

from intact.tracking.settings import load_tracking_config
from intact.tracking.track import find_runs, read_marker, sync, track_checked


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m intact.tracking", description="Log finished intact runs to MLflow.")
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=None,
                        help="config.yaml whose `tracking:` section to use (default: ./config.yaml if present)")
    common.add_argument("--uri", default=None, help="tracking URI (overrides $MLFLOW_TRACKING_URI and tracking.uri)")
    common.add_argument("--experiment", default=None, help="experiment name template, e.g. 'intact/{benchmark}'")
    common.add_argument("--force", action="store_true", help="re-log even when MLflow already holds identical content")
    t = sub.add_parser("track", parents=[common],
                       help="track run folders (exits 0 unless a run's records are damaged; see their tracking.json)")
    t.add_argument("run_dirs", nargs="+", type=Path)
    s = sub.add_parser("sync", parents=[common],
                       help="retry runs whose tracking is missing, pending or outdated (exit 1 if any stays pending)")
    s.add_argument("results", nargs="?", default=Path("results"), type=Path)
    s.add_argument("--all", action="store_true", dest="all_runs", help="every run, not only those that need it")
    st = sub.add_parser("status", help="list the tracking status of every run")
    st.add_argument("results", nargs="?", default=Path("results"), type=Path)
    args = p.parse_args(argv)
    if args.command != "track" and not args.results.is_dir():   # a mistyped path is no empty results tree
        p.error(f"{args.results}: no such folder")

    if args.command == "status":
        for r in find_runs(args.results):
            m = read_marker(r) or {"status": "untracked"}
            print(f"{m['status']:9s} {r}  {m.get('tracking_uri', '')}  {m.get('error', '')}")
        return 0
    cfg_path = args.config or ("config.yaml" if Path("config.yaml").is_file() else None)
    try:
        tracking = load_tracking_config(cfg_path)
        if args.experiment:
            tracking = dataclasses.replace(tracking, experiment=args.experiment)
    except (OSError, ValueError) as err:   # a missing or invalid config, a bad template: one line, exit 2
        p.error(str(err))
    if args.command == "track":
        records = [track_checked(d, dataclasses.replace(tracking, enabled=True), uri=args.uri, force=args.force)
                   for d in args.run_dirs]
        return 1 if any(r["status"] == "refused" for r in records) else 0
    records = sync(args.results, tracking, uri=args.uri, all_runs=args.all_runs, force=args.force)
    if not records:
        print(f"tracking sync: nothing to do: {len(find_runs(args.results))} finished run(s) under {args.results}, "
              "each tracked", file=sys.stderr)
        return 0
    pending = [r for r in records if r["status"] != "done"]
    refused = sum(r["status"] == "refused" for r in records)
    print(f"tracking sync: {len(records) - len(pending)} run(s) tracked, {len(pending) - refused} pending, "
          f"{refused} refused (damaged records, named above)", file=sys.stderr)
    return 1 if pending else 0
