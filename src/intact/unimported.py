"""Reading a module's source without importing it (implementations import torch; a declaration's module may be a
plugin's): the names it binds at top level, and the members of a class and its bases. :mod:`intact.registry`
skips helper modules with :func:`binds`; a benchmark declaration checks its class's pretraining contract with
:func:`class_members`."""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path


@functools.cache
def module_ast(path: str) -> ast.Module:
    """A module's source, parsed (once per process: the declarations' and implementations' modules are read at
    start-up)."""
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def top_level_names(path: str) -> set[str]:
    """The names a module's source binds at top level (definitions, assignments, imports; inside a
    top-level ``if`` / ``try`` too), not those inside functions or classes."""
    body = list(module_ast(path).body)
    names: set[str] = set()
    while body:
        node = body.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            body += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                     *(s for h in getattr(node, "handlers", []) for s in h.body)]
    return names


def class_members(target: str, stop: str) -> set[str] | None:
    """The names that the class ``"package.module:Class"`` and its bases define in their bodies, read from their
    sources (not imported: no torch), the bases followed up to ``stop`` (a target, left out) through the classes
    their modules define or import by name. None where a base cannot be read so (a compiled module, a base that
    is not a plain name): then only importing the class can tell."""
    if target == stop:
        return set()
    module, _, name = target.partition(":")
    try:
        origin = getattr(importlib.util.find_spec(module), "origin", None)
    except (ImportError, ValueError):
        return None
    tree = module_ast(origin) if origin and origin.endswith(".py") else None
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name] if tree else []
    if not found:
        return None
    body = found[-1].body
    members = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    members |= {t.id for n in body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    for base in found[-1].bases:
        where = {n.name: f"{module}:{n.name}" for n in tree.body if isinstance(n, ast.ClassDef)} | {
            a.asname or a.name: importlib.util.resolve_name("." * n.level + (n.module or ""), module.rpartition(".")[0])
            + f":{a.name}" for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        named = where.get(base.id) if isinstance(base, ast.Name) else None
        inherited = class_members(named, stop) if named else None
        if inherited is None:
            return None
        members |= inherited
    return members


def binds(path: Path, attr: str) -> bool:
    """Does the module source at ``path`` bind ``attr`` at top level? True where there is no source to read
    (a compiled module: import it to find out)."""
    return not path.is_file() or attr in top_level_names(str(path))
