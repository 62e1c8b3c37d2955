"""``intact migrate <results>``: rename a results tree written by version 0.1 to 0.2.0's method names.

Version 0.1 stored two methods' runs under their former names (:data:`intact.removed.RENAMED_METHODS`). A run's
name is its folder and enters its config hash, so each renamed run gets its new folder and its new hash:

- ``runs/<b>/<run>/``: the folder, and in it every record that names the run or holds its hash - each task's
  ``train.json`` (``method``, ``config`` and ``config_hash``, the hash of that ``config``: recomputed from the
  renamed one, as 0.2.0 computes it), ``eval.json``, the metadata of ``state.safetensors`` and
  ``hypercube.safetensors`` (the tensors' bytes are not touched), an interrupted task's ``checkpoint.pt``, and
  ``metrics.json``. ``R.csv`` names tasks only: moved as it is.
- ``tracking.json``: renamed, and marked ``pending``: the MLflow store keeps the run under its former name (its
  params and artifacts cannot be rewritten), so ``python -m intact.tracking sync results/`` logs it under the
  new one.
- ``tune/<b>/<search>/choice.json``: the folder and every run name in the choice; every choice (renamed or not)
  sealed, as 0.2.0 writes and checks it (:func:`intact.tune.read_choice`).
- ``logs/`` and ``timings/``: the folders and files named after a renamed run (their text is left as written).
- every run's records (renamed or not): each task's ``train.json`` gets the sha256 of its state and hypercube and
  ``eval.json`` that of the state it evaluated, both sealed (``record_sha256``), as 0.2.0 writes and checks them
  (:func:`intact.results.read_run`), and each safetensors header its metadata in key order (the tensors' bytes
  are not touched). 0.1 wrote no seal: migrating vouches for the records as they are, so migrate a tree you
  trust; a record sealed already is checked first, and an edited one is refused.
- Snakemake's records of the moved outputs (``.snakemake/metadata`` and ``incomplete`` beside ``results``): moved
  to the new paths, with the paths and run names in their params renamed, so that ``snakemake`` finds every
  migrated run up to date and trains nothing. The records of other outputs (tables, figures) are left: their
  inputs moved, so Snakemake rebuilds them, with the new names. The records of ``query_cache`` are rewritten in
  place: its backbone param is the recorded form now (lists), not ``dataclasses.asdict``'s (tuples), as 0.1 gave it.
- each query cache's ``query.json`` written before caches listed their files' sha256: those digests, which its
  readers check (:class:`intact.cache.QueryCache`), computed from the files as they are, as the records' seals.

Every rewritten file keeps its modification time (Snakemake compares them). Nothing is deleted: a file is
rewritten in place or moved. Everything is checked before anything changes: a file it does not know in a run's
folder, a record that does not match its run, a name taken under both names, or a running Snakemake is
refused in one line, and nothing is changed. Run twice, the second run finds nothing to do; an interrupted run is
completed by the next.
"""

from __future__ import annotations

import os
from pathlib import Path

from intact.migrate.snakemake import listed_in_0_1_form, plan_records
from intact.migrate.tree import RUN_NAMED, SYNC, MigrationRefused, Plan, plan_tree, renamed, undigested_caches
from intact.paths import MARKER

__all__ = ["MigrationRefused", "migrate", "unmigrated"]


def unmigrated(workdir: str | os.PathLike) -> str | None:
    """What in ``workdir``'s results tree 0.1 wrote and a migration renames or rewrites, in one line (the first
    found), or None: a run or tune folder under a former name, or a query cache's record. A listing and a record
    per query cache, so the workflow asks at every start (a real run on such a tree would retrain, beside it,
    everything it holds). Records 0.1 did not seal are not looked for here: the job that reads one refuses it."""
    workdir = Path(workdir)
    for top in RUN_NAMED:
        for entry in sorted((workdir / "results").glob(f"{top}/*/*")):
            if renamed(entry.name) != entry.name:
                return f"{entry.relative_to(workdir)} is stored under 0.1's method name ({renamed(entry.name)} now)"
    output = listed_in_0_1_form(workdir)
    if output:
        return f"Snakemake's record of {output} holds 0.1's params"
    caches = undigested_caches(workdir / "results")
    return f"{caches[0].relative_to(workdir)} lists no sha256 of its files" if caches else None


def _write_keeping_time(path: Path, content: bytes) -> None:
    """Replace ``path``'s content atomically, keeping its mode and modification time."""
    st = path.stat()
    tmp = path.with_name(f".{path.name}.migrate.tmp")
    tmp.write_bytes(content)
    os.chmod(tmp, st.st_mode)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, path)


def apply(plan: Plan) -> None:
    """Rewrite, then move, then move Snakemake's records (a later run completes an interrupted one)."""
    for path, content in plan.rewrites:
        _write_keeping_time(path, content)
    for src, dst in plan.moves:
        os.rename(src, dst)
    for old, new, content in plan.records:
        new.parent.mkdir(parents=True, exist_ok=True)
        new.write_bytes(content)
        old.unlink()
        for parent in old.parents:   # as Snakemake does: a long key's emptied folders go
            if not parent.name.startswith("@") or any(parent.iterdir()):
                break
            parent.rmdir()


def migrate(results: str | os.PathLike, dry_run: bool = False) -> str:
    """Migrate the results tree ``results`` (and Snakemake's records beside it); what was done, in a few lines
    (``dry_run``: what would be, each renamed run and tune folder named, and nothing changed). Raises
    :class:`MigrationRefused` (one line) and changes nothing where it does not recognise something."""
    results = Path(results).resolve()
    workdir = results.parent
    locks = sorted((workdir / ".snakemake" / "locks").glob("*.lock"))
    if locks:
        raise MigrationRefused(f"{locks[0]}: a snakemake process works in {workdir} (or left its locks: "
                               "`snakemake --unlock`); nothing was changed")
    plan = plan_tree(results)
    plan_records(plan, workdir)
    if not plan:
        return (f"{results}: nothing to migrate (no run, tune choice, log or Snakemake record under a former name, "
                "no record to seal, no query cache record in 0.1's form or listing without its files' sha256)")
    runs = [src for src, _ in plan.moves if src.parent.parent.name == "runs"]
    seeds = sum(len(list(src.glob("seed*"))) for src in runs)
    markers = sum(1 for p, content in plan.rewrites if p.name == MARKER and SYNC.encode() in content)
    if not dry_run:
        apply(plan)
    lines = [f"{results}: {len(runs)} run names ({seeds} runs), {len(plan.moves) - len(runs)} tune, log and "
             f"timing entries {'to rename' if dry_run else 'renamed'}; {len(plan.rewrites)} records "
             f"{'to rewrite' if dry_run else 'rewritten'}; {len(plan.records)} Snakemake records "
             f"{'to move' if dry_run else 'moved'}"]
    if dry_run:
        lines += [f"  {src.relative_to(results)} -> {dst.name}" for src, dst in plan.moves
                  if src.parent.parent.parent == results]
        lines.append("nothing was changed (--dry-run)")
    elif markers:
        lines.append(f"MLflow still holds {markers} of these runs under their former names: `{SYNC}` logs them "
                     "under the new ones")
    return "\n".join(lines)
