"""Snakemake's records of the outputs a migration moves (:mod:`intact.migrate`): ``.snakemake/metadata`` and
``.snakemake/incomplete`` beside ``results``, one file per output, named by its path in urlsafe base64 (split into
``@<part>/`` folders where longer than a file name may be), as Snakemake 9's ``FilePersistence`` keeps them.

Snakemake reruns a job when the params, the input list, the code or the software stack it recorded for an output
differ from the job's now (``--rerun-triggers``, all by default); an output without a record is judged by its
modification time alone. A moved output's record is moved with it, its input and log paths moved too and its params
renamed, each list sorted as Snakemake sorts it: the job then finds what it recorded, and does not run. The
records of :data:`LISTED` are rewritten in place: 0.1 gave those rules their settings with tuples, 0.2.0 gives
them their recorded form (:func:`intact.settings.recorded`: lists), the same settings in another ``repr``.
"""

from __future__ import annotations

import ast
import base64
import json
import os
from pathlib import Path
from typing import Any

from intact.migrate.tree import MigrationRefused, Plan, migrated_path, read_record, refusal, renamed, renamed_values
from intact.paths import QUERY_CACHE
from intact.settings import plain

#: the rules whose params 0.1 held as ``dataclasses.asdict`` wrote them (tuples), where 0.2.0 writes lists, each
#: with the paths of its outputs (workflow/rules/cache.smk) as a glob
LISTED = {"query_cache": QUERY_CACHE.format(benchmark="*", backbone="*")}


def _record_key(path: Path, base: Path) -> str:
    parts = path.relative_to(base).parts
    return base64.urlsafe_b64decode("".join(p.lstrip("@") for p in parts)).decode()


def _record_path(base: Path, key: str) -> Path:
    """Where Snakemake keeps the record of output ``key`` (``FilePersistence._record_path``)."""
    limit = (os.pathconf(base, "PC_NAME_MAX") if os.name == "posix" else 255) or 255
    b64 = base64.urlsafe_b64encode(key.encode()).decode()
    parts = [b64[i:i + limit - 1] for i in range(0, len(b64), limit - 1)]
    return base.joinpath(*["@" + s for s in parts[:-1]], parts[-1])


def _params(values: list[str], where: Path, plan: Plan, workdir: Path, listed: bool) -> list[str]:
    """A record's params (``repr`` of each value) with every run name and moved path renamed and every renamed
    run's config hash replaced by its new one (and, where ``listed``, every tuple a list), sorted as Snakemake
    sorts them."""
    def rename(text: str) -> str:
        if text in plan.hashes:
            return plan.hashes[text]
        return migrated_path(text, plan, workdir) if text.startswith("results/") else renamed(text)

    out = []
    for text in values:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise refusal(where, f"a Snakemake record's params hold {text[:60]!r}, not a plain value") from None
        if repr(value) != text:
            raise refusal(where, f"a Snakemake record's params hold {text[:60]!r}, which does not read back")
        out.append(repr(renamed_values(plain(value) if listed else value, rename)))
    return sorted(out)


def _migrate_fields(path: Path, data: Any, plan: Plan, workdir: Path) -> None:
    """Migrate a metadata record in place: its input and log paths, its params and its input checksums."""
    if not isinstance(data, dict):
        return
    paths = lambda xs: sorted(migrated_path(x, plan, workdir) for x in xs)  # noqa: E731
    data.update({k: paths(data[k]) for k in ("input", "log") if isinstance(data.get(k), list)})
    if isinstance(data.get("params"), list):
        data["params"] = _params(data["params"], path, plan, workdir, data.get("rule") in LISTED)
    if isinstance(data.get("input_checksums"), dict):
        data["input_checksums"] = {migrated_path(k, plan, workdir): v for k, v in data["input_checksums"].items()}


def _listed(path: Path, plan: Plan, workdir: Path) -> bytes | None:
    """The record of an output that stays, where its rule is one of :data:`LISTED` and its params change."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None   # not this migration's: left as it is
    if not isinstance(data, dict) or data.get("rule") not in LISTED or not isinstance(data.get("params"), list):
        return None
    before = data["params"]
    _migrate_fields(path, data, plan, workdir)
    return json.dumps(data).encode() if data["params"] != before else None


def plan_records(plan: Plan, workdir: Path) -> None:
    """Move Snakemake's records of every moved output, migrated within; rewrite those of :data:`LISTED` in place."""
    meta = workdir / ".snakemake"
    for base in (meta / "metadata", meta / "incomplete"):
        for dirpath, _, filenames in os.walk(base):
            for name in filenames:
                path = Path(dirpath) / name
                try:
                    key = _record_key(path, base)
                except (ValueError, UnicodeDecodeError):
                    continue   # not a record (Snakemake's own migration marker)
                new = migrated_path(key, plan, workdir)
                # an output that stays: its record is read only where a LISTED rule writes it
                listed = base.name == "metadata" and any(Path(key).match(p) for p in LISTED.values())
                if new != key:
                    data = read_record(path)
                    if base.name == "metadata":
                        _migrate_fields(path, data, plan, workdir)
                    plan.records.append((path, _record_path(base, new), json.dumps(data).encode()))
                elif listed and (content := _listed(path, plan, workdir)) is not None:
                    plan.rewrites.append((path, content))


def listed_in_0_1_form(workdir: Path) -> str | None:
    """An output of a :data:`LISTED` rule whose Snakemake record holds 0.1's params (relative to ``workdir``), or
    None: one record read per such output."""
    base = workdir / ".snakemake" / "metadata"
    if not base.is_dir():
        return None   # no records (results copied alone): Snakemake judges the outputs by their times
    for pattern in LISTED.values():
        for output in sorted(workdir.glob(pattern)):
            key = str(output.relative_to(workdir))
            record = _record_path(base, key)
            try:
                if record.is_file() and _listed(record, Plan(), workdir) is not None:
                    return key
            except MigrationRefused:
                continue   # params no migration reads: `intact migrate` names the record
    return None
