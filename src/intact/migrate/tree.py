"""What a migration changes in a results tree (:mod:`intact.migrate`): the renamed names, the run folders and their
records, the tune choices, logs and timings, each checked before anything changes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

from intact.hashing import sha256_file, stable_hash
from intact.io import EDITED, SEAL, SEALED_SINCE, UNSEALED, record_digest, sorted_metadata, with_seal
from intact.paths import MARKER, QUERY_CACHE, QUERY_DIGESTS, RESULTS
from intact.train_record import TENSOR_DIGESTS
from intact.removed import RENAMED_METHODS

_OLD = "|".join(map(re.escape, RENAMED_METHODS))
#: a former name as a run name's base, and in a ``methods.<old>.`` override of a run name
_BASE = re.compile(rf"^({_OLD})(?=$|[+@-])")
_SECTION = re.compile(rf"(?<=[@,])methods\.({_OLD})(?=\.)")
_FORMER = {new: old for old, new in RENAMED_METHODS.items()}
_NEW = "|".join(map(re.escape, _FORMER))
_NEW_BASE = re.compile(rf"^({_NEW})(?=$|[+@-])")
_NEW_SECTION = re.compile(rf"(?<=[@,])methods\.({_NEW})(?=\.)")
#: the folders under ``results`` whose entries ``<folder>/<benchmark>/<name>`` are named after runs
RUN_NAMED = ("runs", "tune")
#: folders whose paths name runs somewhere below (logs/<rule>/<b>/<run>..., timings/<rule>/<b>/<run>/...)
LOG_NAMED = ("logs", "timings")
SEED = re.compile(r"seed\d+")
TASK = re.compile(r"task\d+")
TASK_FILES = ("train.json", "eval.json", "state.safetensors", "hypercube.safetensors", "checkpoint.pt")
RUN_FILES = ("metrics.json", "R.csv", MARKER)
SYNC = "python -m intact.tracking sync results/"
#: every query cache's listing under ``results``
QUERY_CACHES = QUERY_CACHE.removeprefix(f"{RESULTS}/").format(benchmark="*", backbone="*")


class MigrationRefused(Exception):
    """What the migration does not recognise, in one line; nothing has been changed."""


def renamed(name: str) -> str:
    """Run name ``name`` with 0.2.0's method names: its base and its ``methods.<name>.`` overrides."""
    name = _BASE.sub(lambda m: RENAMED_METHODS[m.group(1)], name)
    return _SECTION.sub(lambda m: f"methods.{RENAMED_METHODS[m.group(1)]}", name)


def former(name: str) -> str:
    """The inverse of :func:`renamed` (0.1 stored no run under a new name, so it is exact on 0.1's names)."""
    name = _NEW_BASE.sub(lambda m: _FORMER[m.group(1)], name)
    return _NEW_SECTION.sub(lambda m: f"methods.{_FORMER[m.group(1)]}", name)


def renamed_values(obj: Any, rename: Callable[[str], str] = renamed) -> Any:
    """``obj`` (JSON-like: dicts, lists, tuples, strings) with every run name in it :func:`renamed`, keys too."""
    if isinstance(obj, str):
        return rename(obj)
    if isinstance(obj, dict):
        return {renamed_values(k, rename): renamed_values(v, rename) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(renamed_values(v, rename) for v in obj)
    return obj


def former_values(obj: Any) -> Any:
    return renamed_values(obj, former)


def renamed_entry(name: str, is_dir: bool) -> str:
    """A file or folder named after a run (``<run>/``, ``<run>.log``) with the run's new name."""
    stem, dot, ext = name.rpartition(".")
    return renamed(name) if is_dir or not dot else renamed(stem) + dot + ext


@dataclass
class Plan:
    """Everything a migration changes, checked before any of it is done."""

    rewrites: list[tuple[Path, bytes]] = field(default_factory=list)   #: file -> its new content (same place)
    moves: list[tuple[Path, Path]] = field(default_factory=list)       #: renamed files and folders
    records: list[tuple[Path, Path, bytes]] = field(default_factory=list)  #: Snakemake's: old file, new file, content
    hashes: dict[str, str] = field(default_factory=dict)    #: each renamed run's config hash -> its new one

    def __bool__(self) -> bool:
        return bool(self.rewrites or self.moves or self.records)


def _json(data: Any) -> bytes:
    """A record as the pipeline writes it (:func:`intact.io.write_json`)."""
    return (json.dumps(data, indent=2) + "\n").encode()


def refusal(path: Path, why: str) -> MigrationRefused:
    return MigrationRefused(f"{path}: {why}; nothing was changed")


def read_record(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise refusal(path, f"not a readable JSON record ({type(err).__name__})") from None


# --------------------------------------------------------------------------------------------------
# One run's records


@dataclass
class RunIds:
    """One renamed run: its names and config hashes, before and after."""

    old: str
    new: str
    old_hash: str = ""
    new_hash: str = ""


def run_ids(old: str, records: list[Path]) -> RunIds:
    """The names and hashes of renamed run ``old`` (one seed) from its tasks' ``train.json``: each records the run's
    config and its hash, from which 0.2.0's hash is computed. Where every one is migrated already (an interrupted
    migration), the former hash is that of the config named back."""
    ids = RunIds(old, renamed(old))
    for path in records:
        data = read_record(path)
        config = data.get("config") if isinstance(data, dict) else None
        if not isinstance(config, dict) or data.get("config_hash") != stable_hash(config):
            raise refusal(path, "its config_hash is not the hash of its config, or it has none")
        names = (data.get("method"), config.get("method"))
        if names not in ((ids.old, ids.old), (ids.new, ids.new)):
            raise refusal(path, f"it records method {names[0]!r}, not the folder's {ids.old!r}")
        old_config = former_values(config) if names[0] == ids.new else config
        hashes = (stable_hash(old_config), stable_hash(renamed_values(old_config)))
        if ids.old_hash and (ids.old_hash, ids.new_hash) != hashes:
            raise refusal(path, f"its config hash {hashes[0]} is not its run's ({ids.old_hash})")
        ids.old_hash, ids.new_hash = hashes
    return ids


def _train_record(path: Path, ids: RunIds) -> bytes | None:
    """``train.json``: its name, its config (which names the run) and the hash of that config."""
    data = read_record(path)
    if data["method"] == ids.new:
        return None
    return _json({**data, "method": ids.new, "config_hash": ids.new_hash, "config": renamed_values(data["config"])})


def _renamed_fields(data: dict[str, Any], path: Path, ids: RunIds, hash_key: str) -> dict[str, Any] | None:
    """``data`` with ``method`` and ``hash_key`` of the renamed run; None if they are the new ones already."""
    method, chash = data.get("method"), data.get(hash_key)
    if (method, chash) == (ids.new, ids.new_hash):
        return None
    if (method, chash) != (ids.old, ids.old_hash):
        raise refusal(path, f"it records {method!r} with config hash {chash!r}; its run is {ids.old!r} with "
                            f"{ids.old_hash!r}")
    return {**data, "method": ids.new, hash_key: ids.new_hash}


def _record(path: Path, ids: RunIds) -> bytes | None:
    """``eval.json`` or ``metrics.json``."""
    data = read_record(path)
    new = _renamed_fields(data if isinstance(data, dict) else {}, path, ids, "config_hash")
    return None if new is None else _json(new)


def _tensors(path: Path, ids: RunIds) -> bytes | None:
    """A safetensors file with its metadata renamed; the header is rewritten, the tensors' bytes are not."""
    data = path.read_bytes()
    try:
        size = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + size])
        meta = header["__metadata__"]
    except (struct.error, ValueError, KeyError, TypeError):
        raise refusal(path, "not a safetensors file with the pipeline's metadata") from None
    new = _renamed_fields(meta, path, ids, "config_hash")
    if new is None:
        return None
    # the metadata in a stable order (safetensors writes it in its hash map's)
    text = json.dumps({"__metadata__": dict(sorted(new.items())), **{k: v for k, v in header.items()
                                                                       if k != "__metadata__"}},
                      separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)   # the header is padded to 8 bytes, as safetensors writes it
    return struct.pack("<Q", len(text)) + text + data[8 + size:]


def _checkpoint(path: Path, ids: RunIds) -> bytes | None:
    """An interrupted task's ``checkpoint.pt`` (torch: imported only when a renamed run has one)."""
    import io

    from intact.io import load_checkpoint
    import torch

    ck = load_checkpoint(path)
    new = _renamed_fields(ck, path, ids, "run_hash")
    if new is None:
        return None
    buffer = io.BytesIO()
    torch.save(new, buffer)
    return buffer.getvalue()


def _marker(path: Path, ids: RunIds) -> bytes | None:
    """``tracking.json``: the run's new name and hash; ``pending`` where MLflow holds it under the former name."""
    data = read_record(path)
    if not isinstance(data, dict):
        raise refusal(path, "not a tracking marker")
    if "run" not in data:   # tracking disabled, or it failed before reading the run
        return None
    benchmark, name, *seed = str(data["run"]).split("/")
    if (name, data.get("config_hash")) == (ids.new, ids.new_hash):
        return None
    if (name, data.get("config_hash")) != (ids.old, ids.old_hash):
        raise refusal(path, f"it tracks {data['run']!r} with config hash {data.get('config_hash')!r}, not its run")
    run = "/".join([benchmark, ids.new, *seed])
    new = {**data, "run": run, "run_key": f"{run}@{ids.new_hash}", "config_hash": ids.new_hash}
    if data.get("status") == "done":
        new.update(status="pending", error=f"renamed by `intact migrate`: MLflow holds this run under its 0.1 name "
                                           f"{data['run']!r}; `{SYNC}` logs it under the new one")
    return _json(new)


#: how each file of a run folder is rewritten (None: moved as it is)
REWRITE: dict[str, Callable[[Path, RunIds], bytes | None] | None] = {
    "train.json": _train_record, "eval.json": _record, "metrics.json": _record, "state.safetensors": _tensors,
    "hypercube.safetensors": _tensors, "checkpoint.pt": _checkpoint, MARKER: _marker, "R.csv": None,
}


def _run_files(seed: Path) -> list[Path]:
    """The files of one seed's run folder (each task's, then the run's), each one the pipeline writes there."""
    if not (seed.is_dir() and SEED.fullmatch(seed.name)):
        raise refusal(seed, "not a seed folder of a run (seed<k>)")
    files = []
    for entry in sorted(seed.iterdir(), key=lambda p: (not p.is_dir(), p.name)):
        inside = sorted(entry.iterdir()) if entry.is_dir() and TASK.fullmatch(entry.name) else [entry]
        for f in inside:
            if f.name not in (TASK_FILES if f.parent != seed else RUN_FILES) or f.is_dir():
                raise refusal(f, "not a file the pipeline writes in a run folder; move it out of the way")
        files += inside
    return files


def plan_run(plan: Plan, folder: Path, old: str | None) -> None:
    """The rewrites of one run folder ``runs/<b>/<name>`` (every seed): a renamed run's (``old``, its former name;
    its move is planned by the caller) renamed within, and every run's records sealed (:func:`_sealed`). Each
    seed's ``train.json`` files are rewritten last, so that a migration stopped half way is completed by the next
    (:func:`run_ids`). The tensors' bytes are never changed."""
    for seed in sorted(folder.iterdir()):
        files = _run_files(seed)
        records = [f for f in files if f.name == "train.json"]
        if not records and any(f.name != "R.csv" for f in files):
            raise refusal(seed, "no task has a train.json to give the run's config; finish or remove the run")
        new: dict[Path, bytes] = {}
        if old is not None:
            ids = run_ids(old, records)
            plan.hashes[ids.old_hash] = ids.new_hash
            for f in files:
                rewrite = REWRITE[f.name]
                content = rewrite(f, ids) if rewrite else None
                if content is not None:
                    new[f] = content
        for f in files:   # the metadata in key order, as 0.2.0 writes it (0.1's order changed from file to file)
            if f.suffix == ".safetensors" and sorted_metadata(new.get(f) or f.read_bytes()) != f.read_bytes():
                new[f] = sorted_metadata(new.get(f) or f.read_bytes())
        for record in records:
            new.update(_sealed(record.parent, new))
        plan.rewrites += sorted(new.items(), key=lambda item: item[0].name == "train.json")


def _sealed(task: Path, new: dict[Path, bytes]) -> dict[Path, bytes]:
    """A task's ``train.json`` and ``eval.json`` as 0.2.0 checks them (:func:`intact.results.read_run`): holding the
    sha256 of its state and hypercube (as ``new`` leaves them) and sealed (:data:`intact.io.SEAL`). A record
    sealed already must match its seal, and a digest it holds the file it names: 0.1 wrote neither, so migrating a
    tree vouches for its records as they are (an edited one is refused only where a seal was written)."""
    content = lambda p: new[p] if p in new else p.read_bytes()  # noqa: E731
    files = {key: task / name for name, key in TENSOR_DIGESTS.items() if (task / name).exists()}
    before = {key: hashlib.sha256(path.read_bytes()).hexdigest() for key, path in files.items()}  # each read once
    digests = {key: hashlib.sha256(new[path]).hexdigest() if path in new else before[key]
               for key, path in files.items()}
    evaluated = {k: v for k, v in digests.items() if k == "state_sha256"}
    out = {}
    for path, fields in ((task / "train.json", digests), (task / "eval.json", evaluated)):
        if not path.exists():
            continue
        was = read_record(path)
        _refuse_edited(path, was)
        for key, digest in fields.items():   # the file's digest now, or after it (an interrupted migration)
            if was.get(key) not in (None, before[key], digest):
                raise refusal(path, f"its {key} is not that of {files[key].name} (replaced after it was written)")
        sealed = with_seal(json.loads(content(path)) | fields)
        if _json(sealed) != path.read_bytes():
            out[path] = _json(sealed)
    return out


# --------------------------------------------------------------------------------------------------
# The tree


def _tune_choice(path: Path) -> bytes | None:
    """A search's ``choice.json`` with every run name renamed, sealed as 0.2.0 checks it (:func:`intact.tune.
    read_choice`); None where it is so already. A choice sealed already must match its seal."""
    data = read_record(path)
    _refuse_edited(path, data)
    new = with_seal(renamed_values(data))
    return None if _json(new) == path.read_bytes() else _json(new)


def _refuse_edited(path: Path, record: dict[str, Any]) -> None:
    """A record sealed already must match its seal, and one of 0.2's fields must have one (0.1 sealed none: a
    migration vouches for those as they are)."""
    if SEAL in record and record[SEAL] != record_digest(record):
        raise refusal(path, EDITED)
    if SEAL not in record and SEALED_SINCE in record:
        raise refusal(path, UNSEALED)


def plan_tree(results: Path) -> Plan:
    """Every change the migration of ``results`` makes (raises :class:`MigrationRefused` first)."""
    if not results.is_dir() or not any((results / d).is_dir() for d in (*RUN_NAMED, *LOG_NAMED)):
        raise MigrationRefused(f"{results}: not a results folder (no runs/, tune/, logs/ or timings/ in it)")
    plan = Plan()
    for top in RUN_NAMED:
        for entry in sorted(results.glob(f"{top}/*/*")):
            new = renamed(entry.name)
            if new == entry.name:
                if top == "runs" and entry.is_dir():
                    plan_run(plan, entry, None)   # sealed only
                elif (entry / "choice.json").is_file():
                    content = _tune_choice(entry / "choice.json")   # sealed only
                    plan.rewrites += [(entry / "choice.json", content)] if content is not None else []
                continue
            if (entry.parent / new).exists():
                raise refusal(entry, f"{new!r} exists beside it (stored by 0.2.0?); move one of them out of the way")
            if top == "runs":
                plan_run(plan, entry, entry.name)
            else:
                extra = [p for p in entry.iterdir() if p.name != "choice.json"]
                if extra:
                    raise refusal(extra[0], "not a file the tune study writes; move it out of the way")
                content = _tune_choice(entry / "choice.json") if (entry / "choice.json").exists() else None
                plan.rewrites += [(entry / "choice.json", content)] if content is not None else []
            plan.moves.append((entry, entry.parent / new))
    for top in LOG_NAMED:
        _plan_log_moves(plan, results / top)
    plan.rewrites += [(path, _digested(path)) for path in undigested_caches(results)]
    return plan


def undigested_caches(results: Path) -> list[Path]:
    """The query caches under ``results`` whose listing holds no sha256 of its files (written before caches had
    them)."""
    return [p for p in sorted(results.glob(QUERY_CACHES)) if QUERY_DIGESTS not in read_record(p)]


def _digested(path: Path) -> bytes:
    """A query cache's listing with the sha256 of each file it lists (vouched for as they are, as 0.1's records)."""
    meta = read_record(path)
    files = {key: path.parent / f"{key}.npy" for key in meta.get("files", {})}
    for f in files.values():
        if not f.is_file():
            raise refusal(path, f"it lists {f.name}, which is missing (delete the cache: the workflow writes it again)")
    return _json({**meta, QUERY_DIGESTS: {key: sha256_file(f) for key, f in files.items()}})


def _plan_log_moves(plan: Plan, top: Path) -> None:
    """Move each folder or file under ``top`` named after a renamed run (``<run>/``, ``<run>.log``)."""
    for dirpath, dirnames, filenames in os.walk(top):
        for name, is_dir in [*((d, True) for d in dirnames), *((f, False) for f in filenames)]:
            new = renamed_entry(name, is_dir)
            if new != name:
                src, dst = Path(dirpath) / name, Path(dirpath) / new
                if dst.exists():
                    raise refusal(src, f"{new!r} exists beside it; move one of them out of the way")
                plan.moves.append((src, dst))
        dirnames[:] = [d for d in dirnames if renamed(d) == d]   # a moved folder takes what is in it


def migrated_path(rel: str, plan: Plan, root: Path) -> str:
    """Path ``rel`` (relative to ``root``, the working directory) after the plan's moves."""
    path = root / rel
    for src, dst in plan.moves:
        if path == src or src in path.parents:
            return str((dst / path.relative_to(src)).relative_to(root))
    return rel
