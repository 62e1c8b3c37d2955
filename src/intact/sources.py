"""The package source files a script depends on, read from its imports (no list kept by hand).

The aggregation rules (R matrices, tables, figures) list the code they run as inputs, so that editing it
rebuilds their outputs (by mtime) without retraining anything; training rules list no code. Which files
those are follows from the rule's script: every ``intact`` module it imports, every ``intact`` module
those import (function-level imports included: they are dependencies too; so are the ``"module:attr"``
targets of the lazy registries, and the declaration modules a ``Registry(...)`` finds in its package), the ``__init__.py`` of each package on the way, and the data files
beside those modules that a module names (``paper_numbers.yaml``, ``config.schema.yaml``). A new import
is picked up by the next ``snakemake`` call: there is nothing to keep in step.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from intact.registry import binds

PACKAGE = "intact"
#: the directory that holds the ``intact`` package (src/)
SRC = Path(__file__).resolve().parent.parent
#: modules that decide how a job's process starts, not what it computes (a warm job's outputs are a cold
#: job's, bit for bit: tests/test_warm_workflow.py), so editing them rebuilds nothing
HOW_JOBS_START = frozenset({"intact.warm", "intact.warm_server"})
#: a lazy registry entry, "module:attribute" (intact.registry.load_target)
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
    """Every package file the scripts depend on (see the module docstring), sorted, as strings."""
    return sorted(str(p) for p in _closure(tuple(Path(s).resolve() for s in scripts), src.resolve()))


@lru_cache(maxsize=None)
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


@lru_cache(maxsize=None)
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
    or ``__name__``: the calling package) that bind ``attr`` at top level (:func:`intact.registry.binds`)."""
    if len(call.args) < 4 or not isinstance(call.args[3], ast.Constant):
        return set()
    pkg = call.args[2]
    package = module.removesuffix(".__init__") if getattr(pkg, "id", None) == "__name__" else getattr(pkg, "value", None)
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
