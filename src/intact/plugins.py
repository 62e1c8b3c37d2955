"""Installed plugins: the entry points of a group found by name in the distributions' metadata (nothing is
imported), and the identity of one - its distribution, version and a digest of its files - that every run
using it records and is hashed with (:class:`Plugin`), so a changed plugin reruns its runs and a built-in run
never depends on what else is installed (docs/adding-a-method.md, "Plugins")."""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import asdict, dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from intact.hashing import files_digest


@dataclass(frozen=True)
class Plugin:
    """What a run that uses plugin ``name`` (a ``what``: "method", "benchmark type") depends on."""

    what: str
    name: str
    distribution: str
    version: str
    #: :func:`intact.hashing.files_digest` of the files of the entry point's top-level module or package
    digest: str

    def __str__(self) -> str:
        return f"{self.what} {self.name}: {self.distribution} {self.version} files {self.digest}"

    def record(self) -> dict[str, Any]:
        return asdict(self)


#: the plugins this process imported, in order (a job's provenance: :func:`loaded_plugins`)
_LOADED: dict[tuple[str, str], Plugin] = {}


def group_entry_points(group: str) -> dict[str, list[EntryPoint]]:
    """The entry points of ``group`` by name (two distributions may declare one name), read, not loaded."""
    out: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=group):
        out.setdefault(ep.name, []).append(ep)
    return out


def entry_point_origin(ep: EntryPoint) -> str:
    """An entry point as the messages name it: its line and its distribution."""
    dist = getattr(ep, "dist", None)
    where = f" of distribution '{dist.name} {dist.version}'" if dist is not None else ""
    return f"entry point '{ep.name} = {ep.value}' (group {ep.group!r}){where}"


def identity(what: str, ep: EntryPoint) -> Plugin:
    """The identity of plugin ``ep``, found without importing it."""
    dist = getattr(ep, "dist", None)
    root, files = plugin_files(ep)
    return Plugin(what, ep.name, dist.name if dist is not None else "?", dist.version if dist is not None else "?",
                  files_digest(files, root))


def plugin_files(ep: EntryPoint) -> tuple[Path | None, list[Path]]:
    """The files a plugin's code is: those its distribution's ``RECORD`` lists (an installed wheel: every module,
    the implementation's too; not its ``.dist-info`` folder, scripts outside the site folder or ``__pycache__``),
    those of its entry point's and its ``top_level.txt``'s top-level packages (:func:`module_files`), relative to
    its site folder; and for an editable install, whose ``RECORD`` lists a ``.pth`` file only, every Python file
    of its project (:func:`editable_project`), relative to that."""
    root, files = module_files(ep.value.partition(":")[0])
    dist = getattr(ep, "dist", None)
    for name in ((dist.read_text("top_level.txt") or "").split() if dist is not None else []):
        files += module_files(name)[1]
    for f in (getattr(dist, "files", None) or []):
        parts = f.parts
        if ".." not in parts and "__pycache__" not in parts and not parts[0].endswith(".dist-info"):
            root = Path(dist.locate_file(""))
            files.append(Path(f.locate()))
    project = editable_project(dist)
    if project is not None:
        root = project
        files += project_files(project)
    unique = {os.path.realpath(f): f for f in files if f.is_file()}
    return root, sorted(unique.values())


def editable_project(dist: Any) -> Path | None:
    """The project folder of an editable install (its ``direct_url.json``, PEP 610), or None."""
    try:
        info = json.loads((dist.read_text("direct_url.json") if dist is not None else None) or "null")
    except ValueError:
        return None
    url = info.get("url", "") if isinstance(info, dict) else ""
    if not (info or {}).get("dir_info", {}).get("editable") or not url.startswith("file:"):
        return None
    folder = Path(unquote(urlparse(url).path))
    return folder if folder.is_dir() else None


def project_files(folder: Path) -> list[Path]:
    """A project's Python files, its hidden folders, ``__pycache__``, ``build``, ``dist`` and virtualenvs left out."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in ("__pycache__", "build", "dist")
                             and not (Path(dirpath) / d / "pyvenv.cfg").exists())
        out += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
    return out


def module_files(module: str) -> tuple[Path | None, list[Path]]:
    """The folder a module's top-level package lies in, and the package's files (``__pycache__`` left out); for
    a top-level module, its one file. Found without importing it."""
    try:
        spec = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None, []
    if spec.submodule_search_locations:
        folders = [Path(p) for p in spec.submodule_search_locations]
        files = sorted(f for d in folders for f in d.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        return folders[0].parent, files
    origin = Path(spec.origin) if spec.origin else None
    return (origin.parent, [origin]) if origin is not None and origin.is_file() else (None, [])


def mark_loaded(plugin: Plugin) -> None:
    _LOADED[(plugin.what, plugin.name)] = plugin


def loaded_plugins() -> list[dict[str, Any]]:
    """The plugins this process has imported (what a job records in its provenance): one mapping each."""
    return [p.record() for p in _LOADED.values()]
