"""Config files in layers: a file may name the file it extends (``extends: base.yaml``, relative to itself).

The four paper configs share one base (``configs/paper/base.yaml``) and each adds a short overlay. A
layered file reads as the deep merge of its base and itself (mappings merge key by key; any other value,
lists and ``null`` included, replaces), the same rule ``snakemake --configfile`` applies between files.
Every reader resolves ``extends`` through this module: the Snakefile (:func:`apply_extends`), ``intact
validate`` / ``intact runs`` (:func:`read_files`: several files, layered as ``snakemake --configfile`` layers
them) and ``intact speed``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

EXTENDS = "extends"


class LayerError(ValueError):
    """A layered config file that is missing, not a mapping, or extends itself."""


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """A deep-merged copy: ``over``'s mappings merge into ``base``'s, its other values replace them."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else copy.deepcopy(v)
    return out


def read_layers(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The config of ``path`` with every ``extends`` resolved (base first), without the ``extends`` key."""
    path = Path(path).resolve()
    if path in _seen:
        raise LayerError(f"config file {str(path)!r} extends itself (through {' -> '.join(map(str, _seen))})")
    if not path.is_file():
        raise LayerError(f"config file {str(path)!r} does not exist" + (f" (extended by {str(_seen[-1])!r})" if _seen else ""))
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, Mapping):
        raise LayerError(f"config file {str(path)!r}: expected a mapping at the top level")
    data = dict(data)
    parent = data.pop(EXTENDS, None)
    if parent is None:
        return data
    return merge(read_layers(path.parent / str(parent), (*_seen, path)), data)


def read_files(paths: Iterable[str | Path], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Several config files layered in order over ``base``, each with its ``extends`` resolved: what Snakemake
    makes of ``configfile: first`` and ``--configfile second third`` (a later file wins, mappings merged key by
    key; one file at a time, as Snakemake merges them)."""
    out: dict[str, Any] = dict(base or {})
    for layer in map(read_layers, paths):
        out = merge(out, layer)
    return out


def apply_extends(config: dict[str, Any], files: Iterable[str | Path], overrides: Mapping[str, Any] | None = None) -> None:
    """Snakemake has merged ``config.yaml``, the ``--configfile`` files and ``--config`` overrides without
    knowing ``extends``; re-apply each file with its bases resolved, then the command-line overrides, in place.
    The result equals ``config.yaml`` <- base <- overlay <- ``--config``; a no-op when no file extends another."""
    files = list(files)
    config.pop(EXTENDS, None)
    if not any(EXTENDS in (yaml.safe_load(Path(f).read_text()) or {}) for f in files):
        return
    # every file again, in order: a later file still wins over an overlay
    merged = merge(read_files(files, config), overrides or {})
    config.clear()
    config.update(merged)
