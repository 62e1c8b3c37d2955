"""Checksums and stable hashes (no torch import: the Snakefile uses this at start-up)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any
from collections.abc import Iterable


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def stable_hash(obj: Any, length: int = 12) -> str:
    """A short hash of a JSON-serialisable object that does not depend on dict order."""
    blob = json.dumps(obj, sort_keys=True, default=json_default).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def json_default(o: Any) -> Any:
    """JSON fallback for paths, tensors and numpy scalars."""
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def files_digest(files: Iterable[str | os.PathLike], root: str | os.PathLike | None = None) -> str:
    """One sha256 over the paths and contents of ``files`` (with their count): a Snakemake param, so that a
    rule reruns when one of them changes without listing them as inputs (the paper tables: an input would let
    Snakemake schedule training to refresh a stored run). With ``root``, paths enter relative to it (a plugin's
    files: the same digest wherever it is installed)."""
    h = hashlib.sha256()
    count = 0
    for f in files:
        name = os.path.relpath(f, root) if root is not None else str(f)
        h.update(name.encode() + b"\0" + hashlib.sha256(Path(f).read_bytes()).digest())
        count += 1
    return f"{count}:{h.hexdigest()}"
