"""Atomic, pickle-free persistence: safetensors for tensors, JSON for metadata.

Every writer goes to a temporary file in the destination folder and is renamed into place, so a
killed job never leaves a half-written artifact that a later job would trust; a full disk fails the
write with a message naming the file, and nothing is renamed into place. Every reader turns a damaged
file into an :class:`ArtifactError` that names the file and the command that redoes it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Iterator

from intact.hashing import json_default as _json_default, sha256_file, stable_hash
from intact.paths import user_cache


if TYPE_CHECKING:
    import torch

# torch and safetensors are imported inside the tensor functions, not here: the workflow's own process (every
# `snakemake` call, dry runs included) and the reports read JSON through this module, and importing torch
# would cost each of them over a second (docs/log/2026-11-27-test-suite-timings.md).


class ArtifactError(RuntimeError):
    """A damaged or foreign artifact: the message names the file and how to redo it."""


def redo_hint(path: str | os.PathLike) -> str:
    """The command that redoes ``path`` (a Snakemake output; a checkpoint is simply deleted)."""
    path = Path(path)
    if path.name == "checkpoint.pt":
        return f"delete {path} and rerun: the task restarts from its first epoch"
    return (f"redo it with `snakemake --forcerun {path}` (reruns the job that writes it and everything that "
            "depends on it), or delete the file and rerun snakemake")


def damaged(path: str | os.PathLike, why: str) -> ArtifactError:
    return ArtifactError(f"{path} is damaged or foreign: {why}; {redo_hint(path)}")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: the mode of a file written here: what ``open`` gives under the process's umask (read once, at import), not
#: mkstemp's 0600, which kept the results from the colleagues who share a cluster's project folder
FILE_MODE = 0o666 & ~_umask()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds. The file gets
    :data:`FILE_MODE`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        free = shutil.disk_usage(path.parent).free
        raise OSError(err.errno, f"no space left on the device while writing {path} ({free} bytes free there); "
                      "nothing was written under that name - free some space and rerun") from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def sha256_file_cached(path: str | os.PathLike) -> str:
    """:func:`~intact.hashing.sha256_file`, kept in the user's cache under the file's path, inode, size and mtime
    (ns): a large weights file is read once per version, not at every workflow start."""
    st = os.stat(path)
    folder = user_cache("sha256")
    if folder is None:
        return sha256_file(path)
    entry = folder / stable_hash([os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns], 24)
    try:
        return entry.read_text().strip()
    except OSError:
        digest = sha256_file(path)
    try:
        with atomic_path(entry) as tmp:
            tmp.write_text(digest + "\n")
    except OSError:
        pass   # a read-only cache: read again next time
    return digest


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise damaged(path, f"not valid JSON ({err})") from None


#: the key of a sealed record (:func:`write_record`): the sha256 of the rest of the record
SEAL = "record_sha256"
#: why a sealed record whose content its seal does not vouch for is refused
EDITED = f"its content does not match its {SEAL} (edited after its job wrote it)"
#: a key every task record holds since records are sealed (0.1's held neither): one without a seal was edited
SEALED_SINCE = "state_sha256"
#: why a record that lost its seal is refused
UNSEALED = f"it holds {SEALED_SINCE} but no {SEAL}: its seal was removed (edited after its job wrote it)"


def record_digest(record: dict[str, Any]) -> str:
    """The sha256 of a record as JSON, keys sorted, its seal left out: the same for the object a job wrote and
    for the one read back (JSON numbers round-trip exactly)."""
    body = {k: v for k, v in record.items() if k != SEAL}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def with_seal(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` sealed: its content, then :data:`SEAL` holding :func:`record_digest` of it (a seal it held is
    replaced)."""
    body = {k: v for k, v in record.items() if k != SEAL}
    return {**body, SEAL: record_digest(body)}


def write_record(path: str | os.PathLike, obj: dict[str, Any]) -> dict[str, Any]:
    """Write a primary record (a task's ``train.json``, ``eval.json``: nothing they are derived from is kept) as
    :func:`write_json` does, sealed: :data:`SEAL` holds :func:`record_digest` of the rest, so an edit that does
    not recompute it is found (:func:`check_seal`). The record as written."""
    plain = with_seal(json.loads(json.dumps(obj, default=_json_default)))  # what a reader gets back
    write_json(path, plain)
    return plain


def check_seal(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """``record`` (read from ``path``) is as its job wrote it: its :data:`SEAL` matches its content. An edited
    record, or one written before records were sealed, raises :class:`ArtifactError` naming the file."""
    if SEAL not in record and SEALED_SINCE in record:
        raise damaged(path, UNSEALED)
    if SEAL not in record:
        raise damaged(path, f"it holds no {SEAL} (written by 0.1, before records were sealed: `intact migrate "
                            "results`): it cannot be checked")
    if record[SEAL] != record_digest(record):
        raise damaged(path, EDITED)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def save_tensors(
    path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> str:
    """Save a flat dict of tensors with safetensors, atomically; the sha256 of the bytes written (what a record
    of the file keeps: :func:`check_tensors`). The same tensors and metadata give the same bytes."""
    from safetensors.torch import save

    flat = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    data = sorted_metadata(save(flat, metadata=metadata))  # in memory: a full disk surfaces as Python's OSError
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def sorted_metadata(data: bytes) -> bytes:
    """safetensors bytes with the header's ``__metadata__`` in key order. safetensors keeps the metadata in a
    Rust HashMap and writes it in that map's order, which changes from call to call: the same tensors gave
    different bytes (and sha256) each time. The header is rewritten as safetensors writes it (compact JSON,
    ``__metadata__`` first, padded with spaces to 8 bytes; the same length), so a file whose map happened to
    come out sorted keeps its bytes, and the tensor data are untouched."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    meta = header.pop("__metadata__", None)
    if not meta or len(meta) < 2:
        return data
    text = json.dumps({"__metadata__": dict(sorted(meta.items())), **header}, separators=(",", ":"),
                      ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    assert len(text) == size, "a reordered safetensors header must keep its length"
    return data[:8] + text + data[8 + size:]


def _open_tensors(path: str | os.PathLike, expect: dict[str, str] | None, keys: bool = True) -> dict[str, torch.Tensor]:
    """The metadata (and, with ``keys``, the tensors) of a safetensors file; a damaged file, or one that records
    another value of a key of ``expect``, raises :class:`ArtifactError` naming it."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            # copied out of the file's mapping: a view starts wherever the header (its length varies with the
            # metadata: the method's name) ends, and CPU kernels round by the address's alignment
            tensors = {k: f.get_tensor(k).clone() for k in f.keys()} if keys else {}
    except FileNotFoundError:
        raise
    except Exception as err:  # safetensors raises its own error types for truncated or foreign bytes
        raise damaged(path, f"not a readable safetensors file ({type(err).__name__}: {err})") from None
    for key, want in (expect or {}).items():
        if key in meta and meta[key] != want:
            raise damaged(path, f"it records {key} = {meta[key]!r}, this job expects {want!r}")
    return tensors


def load_tensors(path: str | os.PathLike, expect: dict[str, str] | None = None) -> dict[str, torch.Tensor]:
    """Load a safetensors file; ``expect``: metadata it must carry where it records the key (a state of
    another method, task or config is refused, never loaded)."""
    return _open_tensors(path, expect)


def check_tensors(path: str | os.PathLike, expect: dict[str, str], sha256: Any, record: str | os.PathLike) -> None:
    """A saved tensor file is the one its record describes: readable, written for ``expect`` (method, task,
    config hash: its metadata), and its bytes' sha256 the ``sha256`` that ``record`` holds. A truncated, edited,
    swapped or foreign file raises :class:`ArtifactError` naming it and the command that redoes it."""
    _open_tensors(path, expect, keys=False)  # readable: the header covers the file (safetensors checks it)
    if not sha256:
        raise damaged(record, f"it records no sha256 of {Path(path).name} (written before records were checked, "
                              "or edited): it cannot be checked")
    got = sha256_file(path)
    if got != sha256:
        raise damaged(path, f"its sha256 is {got[:16]}..., {record} records {str(sha256)[:16]}... (edited, or "
                            "replaced after the record was written)")


def save_checkpoint(path: str | os.PathLike, obj: dict[str, Any]) -> None:
    """Save a nested dict of tensors and plain values (optimizer / RNG states) with torch.save, atomically.

    Loaded back with ``weights_only=True`` so nothing executable is ever unpickled.
    """
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)  # in memory first: torch's own writer reports a full disk as an opaque RuntimeError
    with atomic_path(path) as tmp:
        # its bytes, not getbuffer()'s view: a failed write's traceback holds the view, and freeing it crashed the
        # garbage collector of CPython 3.12.1 (python/cpython#111049, #77894): a full disk became a segfault
        tmp.write_bytes(buffer.getvalue())


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint`; a damaged or foreign file raises ArtifactError."""
    import torch

    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # truncated zip, foreign bytes, pickled code refused by weights_only
        raise damaged(path, f"not a readable checkpoint ({type(err).__name__}: {str(err).splitlines()[0]})") from None
    if not isinstance(ck, dict) or not {"run_hash", "task", "method"} <= set(ck):
        raise damaged(path, "not a training checkpoint of this pipeline")
    return ck
