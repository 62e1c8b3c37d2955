"""The package source files a script depends on, read from its imports (no list kept by hand).

The aggregation rules (R matrices, tables, figures) list the code they run as inputs, so that editing it
rebuilds their outputs (by mtime) without retraining anything; training rules list no code. Which files
those are follows from the rule's script: every ``intact`` module it imports, every ``intact`` module
those import (function-level imports included: they are dependencies too; so are the ``"module:attr"``
targets of the lazy registries, and the declaration modules a ``Registry(...)`` finds in its package), the
``__init__.py`` of each package on the way, and the data files beside those modules that a module names
(``paper_numbers.yaml``, ``config.schema.yaml``). A new import is picked up by the next ``snakemake`` call:
there is nothing to keep in step.
"""

from __future__ import annotations

import ast
import json
import os
import re
from functools import cache
from pathlib import Path

from intact.hashing import stable_hash
from intact.io import write_json
from intact.paths import user_cache
from intact.unimported import binds

PACKAGE = "intact"
#: the directory that holds the ``intact`` package (src/)
SRC = Path(__file__).resolve().parent.parent
#: modules that decide how a job's process starts, not what it computes (a warm job's outputs are a cold
#: job's, bit for bit: tests/test_warm_workflow.py), so editing them rebuilds nothing
HOW_JOBS_START = frozenset({"intact.runtime.warm", "intact.runtime.warm_server", "intact.runtime.protocol"})
#: a lazy registry entry, "module:attribute" (intact.registry.import_target)
_LAZY = re.compile(r"intact(\.\w+)*:\w+")


def module_file(name: str, src: Path = SRC) -> Path | None:
    """The source file of module ``name`` (``intact.x.y``) under ``src``, or None if there is none."""
    base = src.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_modules(path: Path, src: Path = SRC) -> set[str]:
    """The ``intact`` modules that the file ``path`` imports anywhere in it (relative imports resolved)
    or names as a lazy registry target."""
    return _scan(Path(path).resolve(), src.resolve())[0]


def source_files(*scripts: str | Path, src: Path = SRC) -> list[str]:
    """Every package file the scripts depend on (see the module docstring), sorted, as strings. Kept on disk
    between processes (:func:`cache_file`), keyed by every file of the package and the scripts (name, size,
    mtime): reading ~100 modules' syntax trees is ~0.25 s of every ``snakemake`` call that plans a report."""
    scripts_, src = tuple(Path(s).resolve() for s in scripts), src.resolve()
    state, key = _tree_state(src / PACKAGE), json.dumps([[str(s), _stat(s)] for s in scripts_])
    path = cache_file(src)
    closures = _read(path, state) if path else {}
    if key in closures:
        return closures[key]
    files = sorted(str(p) for p in _closure(scripts_, src))
    if path:
        _write(path, {"state": state, "closures": {**closures, key: files}})
    return files


def cache_file(src: Path = SRC) -> Path | None:
    """Where :func:`source_files` keeps its results for the package under ``src``: ``<digest of src>.json`` in
    :func:`intact.paths.user_cache`'s ``sources`` folder; None where there is none (nothing is kept)."""
    folder = user_cache("sources")
    return folder / f"{stable_hash(str(src.resolve()), 16)}.json" if folder else None


def _tree_state(package: Path) -> str:
    """A digest of the name, size and mtime of every file under ``package``: what the closures are read from
    (module files and their folders' listings; the scripts' own are in each closure's key)."""
    state = []
    for root, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        state += [[os.path.join(root, f), _stat(os.path.join(root, f))] for f in sorted(files)]
    return stable_hash(state, 32)


def _stat(path: str | Path) -> list[int] | None:
    """(size, mtime in ns) of a file, or None if it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _read(path: Path, state: str) -> dict[str, list[str]]:
    """The closures kept at ``path`` if they were read from the package in ``state``; none where the file is
    missing, unreadable, damaged or of another state."""
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    closures = kept.get("closures") if isinstance(kept, dict) and kept.get("state") == state else None
    return closures if isinstance(closures, dict) else {}


def _write(path: Path, data: dict) -> None:
    """Write ``data`` whole (:func:`intact.io.write_json`: concurrent workflow calls read one version or the
    other); a cache that cannot be written (a read-only home) is skipped."""
    try:
        write_json(path, data)
    except OSError:
        pass


@cache
def _scan(path: Path, src: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(``intact`` modules imported or named by ``path``, the string constants in it)."""
    package = _package(path, src)
    names: set[str] = set()
    strings: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from this module's package, one level up per extra dot
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names.add(base)
            # `from intact.report import plots` imports the module intact.report.plots
            names.update(f"{base}.{a.name}" for a in node.names if module_file(f"{base}.{a.name}", src))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Registry":
            names.update(_registered(node, ".".join(_package(path, src) + [path.stem]), src))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
            if _LAZY.fullmatch(node.value):
                names.add(node.value.partition(":")[0])
    return frozenset(n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")), frozenset(strings)


@cache
def _closure(scripts: tuple[Path, ...], src: Path) -> frozenset[Path]:
    todo = [m for s in scripts for m in _scan(s, src)[0]]
    files: set[Path] = set()
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name in HOW_JOBS_START:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a.b.c runs a and a.b
        path = module_file(name, src)
        if path is None:
            continue
        modules, strings = _scan(path, src)
        todo += modules
        files.add(path)
        files.update(d for d in path.parent.iterdir() if d.name in strings and d.is_file() and d.suffix != ".py")
    return frozenset(files)


def _registered(call: ast.Call, module: str, src: Path) -> set[str]:
    """The modules a ``Registry(what, kind, package, attr, ...)`` call imports: those of ``package`` (a string,
    or ``__name__``: the calling package) that bind ``attr`` at top level (:func:`intact.unimported.binds`)."""
    if len(call.args) < 4 or not isinstance(call.args[3], ast.Constant):
        return set()
    pkg = call.args[2]
    own = getattr(pkg, "id", None) == "__name__"   # Registry(..., __name__, ...): the registry module's own package
    package = module.removesuffix(".__init__") if own else getattr(pkg, "value", None)
    folder = src.joinpath(*package.split(".")) if isinstance(package, str) else None
    if folder is None or not folder.is_dir():
        return set()
    return {f"{package}.{f.stem}" for f in sorted(folder.glob("*.py"))
            if f.stem != "__init__" and binds(f, call.args[3].value)}


def _package(path: Path, src: Path) -> list[str]:
    """The package of the module in ``path``, as its parts ([] for a script outside ``src``)."""
    try:
        parts = list(path.relative_to(src).with_suffix("").parts)
    except ValueError:
        return []
    return parts[:-1]
