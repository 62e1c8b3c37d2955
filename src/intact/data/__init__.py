"""The benchmark registry, derived from the benchmarks' own declarations (:mod:`intact.data.declare`).

A built-in benchmark is a module of this package that assigns ``BENCHMARK`` at its top level (the other
modules are helpers: read, not imported here, since some import torch); a benchmark of another installed
package registers under the entry-point group ``intact.benchmarks`` (``name = "package.module:BENCHMARK"``).
Both are found by :class:`intact.registry.Registry`, as the methods are, so a new benchmark is one file:
nothing else lists it, and one that fails to load refuses only the configs that use it. Importing the
declarations imports no torch (the Snakefile validates configs at start-up and on every cluster job).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Mapping

from intact.data.declare import BenchmarkSettings, BenchmarkType, benchmark_type, use_registry
from intact.data.manifest import ManifestError, check_manifest
from intact.registry import Registry
from intact.settings import ConfigError, build_dataclass

ENTRY_POINT_GROUP = "intact.benchmarks"

#: type name -> declaration, every benchmark this installation knows: the built-ins (``BENCHMARKS.builtin``),
#: then those of installed packages. A type whose module or entry point failed to load is not in it; looking
#: its name up raises a one-line :class:`~intact.registry.RegistryError` (``BENCHMARKS.failures``).
BENCHMARKS: Registry[BenchmarkType] = Registry("benchmark type", BenchmarkType, __name__, "BENCHMARK",
                                               ENTRY_POINT_GROUP)
use_registry(BENCHMARKS)
#: the types this package declares (the project's own docs cover these only, whatever else is installed)
BUILTIN_TYPES: tuple[str, ...] = tuple(BENCHMARKS.builtins())


def benchmark_settings(data: Mapping[str, Any]) -> BenchmarkSettings:
    """A benchmark's typed settings (the dataclass its type declares) from their plain form
    (``{"name": ..., "type": ..., ...}``: a config entry with its name, or a job's params)."""
    try:
        cls = benchmark_type(str(data.get("type"))).settings
    except KeyError as err:
        raise ConfigError(f"config: {err.args[0]}") from None
    return build_dataclass(cls, data, f"benchmarks.{data.get('name')}")


def benchmark_class(kind: str) -> type:
    """Import and return the implementation class of benchmark type ``kind``."""
    return benchmark_type(kind).import_class()


def open_benchmark(manifest_path, expected: BenchmarkSettings | None = None):
    """Open a prepared benchmark from its ``manifest.json`` (the type is read from the manifest). With
    ``expected`` (the job's resolved benchmark), the manifest is first checked against it
    (:func:`intact.data.manifest.check_manifest`): data prepared otherwise are refused before any training."""
    from intact.io import read_json

    if expected is not None:
        check_manifest(manifest_path, expected)
    return benchmark_class(read_json(manifest_path)["type"])(manifest_path)


def prepare_benchmark(cfg: BenchmarkSettings, out_dir: str | Path, **options: Any) -> Path:
    """Prepare benchmark ``cfg`` under ``out_dir`` with its type's ``prepare(cfg, out_dir, **options)`` and check
    the manifest it wrote (schema and settings: :func:`~intact.data.manifest.check_manifest`); a manifest that
    does not match is removed (nothing half-written stays) and refused in one line naming the type's plugin."""
    path = Path(out_dir) / "manifest.json"
    cfg.declaration.import_class().prepare(cfg, out_dir, **options)
    try:
        check_manifest(path, cfg, written=True)
    except ManifestError:
        path.unlink(missing_ok=True)
        raise
    return path

