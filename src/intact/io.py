"""Atomic, pickle-free persistence: safetensors for tensors, JSON for metadata.

Every writer goes to a temporary file in the destination folder and is renamed into place, so a
killed job never leaves a half-written artifact that a later job would trust.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors.torch import load_file, save_file

from intact.hashing import json_default as _json_default


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def save_tensors(
    path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> None:
    """Save a flat dict of tensors with safetensors, atomically."""
    flat = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(flat, str(tmp), metadata=metadata)


def load_tensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def save_checkpoint(path: str | os.PathLike, obj: dict[str, Any]) -> None:
    """Save a nested dict of tensors and plain values (optimizer / RNG states) with torch.save, atomically.

    Loaded back with ``weights_only=True`` so nothing executable is ever unpickled.
    """
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)
