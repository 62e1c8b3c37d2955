"""What a prepared benchmark's ``manifest.json`` holds, checked where it is written and wherever it is read.

``prepare`` writes the manifest (a type's own code, a plugin's included); :func:`check_manifest` holds it to
:data:`MANIFEST_SCHEMA` and to the settings it was prepared for: the benchmark's name and type, its tasks in
order, its class count, its input shape (``image_shape`` / ``image_size`` against ``image_size`` and the
declared channels, ``features`` against a ``features`` setting) and the settings the data were prepared with
(``config``: the split, its seeds and fractions, the data root; everything but the keys a run applies when it
reads the data, :attr:`~intact.data.declare.BenchmarkSettings.read_keys`). The prepare jobs check what they
wrote; every job that reads prepared data (a task, a query cache, a pretraining) checks it against its own
resolved benchmark before it trains. A mismatch is one line naming the benchmark, its plugin (a type that is
not built in) and what differs. Torch-free; a helper module of :mod:`intact.data` (it declares no benchmark).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import intact.data.declare as declare
from intact.data.declare import COMMON_KEYS, BenchmarkSettings
from intact.io import damaged
from intact.naming import excerpt
from intact.settings import plain, recorded

#: the keys every manifest holds (a type may record more: counts, class names, split files, ...)
MANIFEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["benchmark", "type", "num_classes", "tasks", "files"],
    "properties": {
        "benchmark": {"type": "string", "minLength": 1, "description": "the name under benchmarks:"},
        "type": {"type": "string", "minLength": 1, "description": "the benchmark type (its declaration's name)"},
        "num_classes": {"type": "integer", "minimum": 1},
        "tasks": {"type": "array", "minItems": 1, "description": "one entry per task, in the run's order",
                  "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
        "files": {"type": "object", "description": "data file (relative path) -> its sha256",
                  "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
        "config": {"type": "object", "description": "the settings the data were prepared with"},
        "image_shape": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 3, "maxItems": 3,
                        "description": "[channels, height, width] of every image"},
        "image_size": {"type": "integer", "minimum": 1, "description": "the side of every (square, RGB) image"},
        "features": {"type": "integer", "minimum": 1, "description": "the length of every input vector"},
    },
}


class ManifestError(ValueError):
    """A manifest that breaks :data:`MANIFEST_SCHEMA` or does not match its benchmark's settings (one line)."""


def check_manifest(path: str | Path, cfg: BenchmarkSettings, written: bool = False) -> dict[str, Any]:
    """The manifest at ``path``, held to :data:`MANIFEST_SCHEMA` and to ``cfg``; :class:`ManifestError` naming the
    benchmark, its plugin and what differs. ``written``: checked by the job that has just prepared it (the
    message then blames the type's ``prepare``), else by a job about to read it."""
    path = Path(path)
    where = f"benchmark {cfg.name!r} (type {cfg.type!r}{_plugin(cfg.type)})"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"{where}: {'its prepare wrote no' if written else 'no prepared'} {path}") from None
    except (OSError, ValueError) as err:
        if written:
            raise ManifestError(f"{where}: its prepare wrote an unreadable {path} ({type(err).__name__}: "
                                f"{err})") from None
        raise damaged(path, f"{where}'s manifest cannot be read ({type(err).__name__}: {err})") from None
    problems = _schema_problems(manifest) or differences(manifest, cfg)
    if problems:
        fix = ("its prepare must write what the config declares" if written
               else f"it was prepared otherwise than this run declares: redo it with snakemake --forcerun {path}")
        raise ManifestError(f"{where}: {path} does not match the config: {'; '.join(problems)} ({fix})")
    return manifest


def differences(manifest: Mapping[str, Any], cfg: BenchmarkSettings) -> list[str]:
    """What ``manifest`` (valid against :data:`MANIFEST_SCHEMA`) says otherwise than ``cfg``, one phrase each."""
    out = [f"{what} {excerpt(got)}, the config {excerpt(want)}" for what, got, want in (
        ("benchmark", manifest["benchmark"], cfg.name), ("type", manifest["type"], cfg.type),
        ("tasks", [t["name"] for t in manifest["tasks"]], list(cfg.tasks)),
        ("num_classes", manifest["num_classes"], cfg.num_classes)) if got != want]
    out += _shape_differences(manifest, cfg)
    prepared, settings = manifest.get("config") or {}, recorded(cfg)
    changed = [k for k in settings if k not in (*COMMON_KEYS, *cfg.read_keys) and k in prepared
               and plain(prepared[k]) != settings[k]]
    out += [f"config.{k} {excerpt(prepared[k])}, the config {excerpt(settings[k])}" for k in changed]
    return out


def _shape_differences(manifest: Mapping[str, Any], cfg: BenchmarkSettings) -> list[str]:
    out = []
    size, channels = getattr(cfg, "image_size", None), cfg.declaration.channels
    shape = manifest.get("image_shape")
    if size is not None and shape is not None and list(shape[1:]) != [size, size]:
        out.append(f"image_shape {shape}, the config image_size {size}")
    if size is not None and manifest.get("image_size", size) != size:
        out.append(f"image_size {manifest['image_size']}, the config {size}")
    if channels is not None and shape is not None and shape[0] != channels:
        out.append(f"image_shape {shape}, the type's channels {channels}")
    features = getattr(cfg, "features", None)
    if features is not None and manifest.get("features", features) != features:
        out.append(f"features {manifest['features']}, the config {features}")
    return out


def _schema_problems(manifest: Any) -> list[str]:
    error = next(iter(_validator().iter_errors(manifest)), None)
    if error is None:
        return []
    key = ".".join(map(str, error.absolute_path)) or "the manifest"
    return [f"{key}: {error.message if len(error.message) < 200 else excerpt(error.instance)} (the manifest "
            "schema: intact.data.manifest.MANIFEST_SCHEMA)"]


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(MANIFEST_SCHEMA)


def _plugin(kind: str) -> str:
    """``", from <entry point of distribution ...>"`` for a type that is not built in; empty for a built-in."""
    registry = declare.TYPES  # the registry of intact.data (handed to intact.data.declare: no import of it here)
    if kind in registry and kind not in getattr(registry, "builtin", registry):
        return f", from {registry.origin(kind)}"
    return ""
