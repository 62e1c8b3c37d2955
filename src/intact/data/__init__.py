"""The benchmark registry, derived from the benchmarks' own declarations (:mod:`intact.data.declare`).

A built-in benchmark is a module of this package that assigns ``BENCHMARK`` at its top level (the other
modules are helpers; they are not imported here, since some import torch); a benchmark of another installed
package registers under the entry-point group ``intact.benchmarks`` (``name = "package.module:BENCHMARK"``).
Both are found here, so a new benchmark is one file: nothing else lists it. Importing the declarations
imports no torch (the Snakefile validates configs at start-up and on every cluster job).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from importlib.metadata import entry_points
from pathlib import Path

from intact.data.declare import TYPES, BenchmarkType, benchmark_type

ENTRY_POINT_GROUP = "intact.benchmarks"


def _declares(path: Path) -> bool:
    """Does the module at ``path`` assign ``BENCHMARK`` at its top level? (read, not imported)"""
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "BENCHMARK" for t in node.targets)
               for node in tree.body)


def _builtin() -> list[BenchmarkType]:
    folder = Path(__file__).parent
    return [importlib.import_module(f"{__name__}.{info.name}").BENCHMARK
            for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda m: m.name)
            if not info.ispkg and _declares(folder / f"{info.name}.py")]


def _installed() -> list[BenchmarkType]:
    out = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        bench = ep.load()
        if not isinstance(bench, BenchmarkType):
            raise TypeError(f"entry point {ep.name!r} = {ep.value!r} of group {ENTRY_POINT_GROUP!r}: "
                            f"expected an intact.data.declare.BenchmarkType, got {type(bench).__name__}")
        if bench.name != ep.name:
            raise ValueError(f"entry point {ep.name!r} of group {ENTRY_POINT_GROUP!r} declares benchmark "
                             f"{bench.name!r}: the two names must agree")
        out.append(bench)
    return out


def discover() -> dict[str, BenchmarkType]:
    """Every benchmark type: the built-ins, then those of installed packages; a name may be declared only once."""
    found: dict[str, BenchmarkType] = {}
    for bench in _builtin() + _installed():
        if bench.name in found:
            raise ValueError(f"benchmark type {bench.name!r} is declared twice (a built-in or another package has it)")
        found[bench.name] = bench
    return found


TYPES.update(discover())
#: type name -> declaration, every benchmark this installation knows
BENCHMARK_TYPES: dict[str, BenchmarkType] = TYPES
#: the types this package declares (the project's own docs cover these only, whatever else is installed)
BUILTIN_TYPES: tuple[str, ...] = tuple(n for n, t in TYPES.items() if t.settings.__module__.startswith(f"{__name__}."))


def benchmark_class(kind: str) -> type:
    """Import and return the implementation class of benchmark type ``kind``."""
    return benchmark_type(kind).load()


def open_benchmark(manifest_path):
    """Open a prepared benchmark from its ``manifest.json`` (the type is read from the manifest)."""
    from intact.io import read_json

    return benchmark_class(read_json(manifest_path)["type"])(manifest_path)
