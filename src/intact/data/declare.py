"""How a benchmark declares itself: one :class:`BenchmarkType` per benchmark module, torch-free.

A benchmark module (``intact/data/<name>.py``, or a module of another package registered under the
entry-point group ``intact.benchmarks``) holds, in this order: its settings dataclass (a subclass of
:class:`BenchmarkSettings`, fields declared with :func:`~intact.settings.setting`: types, defaults,
bounds, descriptions; types of one family subclass the family's settings and declare again the keys each takes,
the image types' :mod:`intact.data.image_config`), its checks, and::

    BENCHMARK = BenchmarkType("my_bench", MySettings, "my_package.my_bench:MyBench", "one line for the docs",
                              tasks=("sunny", "rainy", "night"), num_classes=10)

Its implementation, the :class:`~intact.data.base.Benchmark` subclass named by that string, is a module-level
class; where its module imports torch (the built-in ``digits``: ``intact/data/impl/digits.py``) only a job
imports it, and validating a config never imports torch.

Everything else is derived from these declarations (docs/adding-a-benchmark.md): the registry
(:mod:`intact.data`), the ``benchmarks.<name>`` part of the config schema (:func:`benchmark_schema`), a
config entry's task sequence and class count (:class:`BenchmarkSettings`), the early checks
(:mod:`intact.checks`), which Snakemake rule prepares it and the configuration reference.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar
from collections.abc import Callable, Iterable, Mapping

from intact.registry import check_implementation, hook_problem, import_target, resolve
from intact.unimported import class_members
from intact.settings import check_declared, fields_schema, settable_fields

#: type name -> declaration: every benchmark this installation knows (the registry :data:`intact.data.BENCHMARKS`,
#: handed over by :func:`use_registry` when :mod:`intact.data` is imported: the declarations cannot import it)
TYPES: Mapping[str, BenchmarkType] = {}

#: the keys every ``benchmarks.<name>`` entry has; not settings of the type
COMMON_KEYS = ("name", "type", "backbone")

#: what the implementation of a type declared ``pretrains=True`` defines (:class:`~intact.data.base.Benchmark`)
PRETRAINING = ("pretrain_set", "clean_test_set")

#: ``check(settings) -> [(key, problem), ...]``: a benchmark's own consistency checks, run at config validation
BenchmarkCheck = Callable[[Any], Iterable[tuple[str, str]]]


def use_registry(registry: Mapping[str, BenchmarkType]) -> None:
    """Make ``registry`` the one :func:`benchmark_type` looks names up in."""
    global TYPES
    TYPES = registry


def benchmark_type(name: str) -> BenchmarkType:
    """The declaration of benchmark type ``name``; a KeyError naming the known ones, or (a type whose module
    or entry point failed to load) the one-line reason."""
    return resolve(TYPES, name, "benchmark type")


@dataclass(frozen=True)
class BenchmarkSettings:
    """The settings of one ``benchmarks.<name>`` entry: its name, type and backbone, then the type's own fields.

    The task sequence and the class count come from the type's declaration; a ``domains`` field (where the
    settings have one) selects and orders a subset of the declared tasks.
    """

    name: str
    type: str
    backbone: str

    #: settings a run applies when it reads the prepared data, not when they are prepared (the image types'
    #: validation part): a manifest prepared with other values of these still serves the run
    read_keys: ClassVar[tuple[str, ...]] = ()

    @property
    def declaration(self) -> BenchmarkType:
        return benchmark_type(self.type)

    @property
    def tasks(self) -> tuple[str, ...]:
        """The task sequence: ``domains`` if the settings have it and it is set, else the declared order."""
        return tuple(getattr(self, "domains", ()) or ()) or self.declaration.tasks

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    @property
    def num_classes(self) -> int:
        return self.declaration.num_classes

    def train_images(self, eval_split: str) -> int | None:
        """The fewest training images of a task under ``eval_split``, where known before the benchmark is prepared
        (checked against ``optim.batch_size`` at validation); None by default: known to the job."""
        return None

    def missing_inputs(self) -> list[str]:
        """Messages naming input files or folders that are not there (checked before a real run; a dry run
        only lists them). Nothing by default: a benchmark that reads local data overrides this."""
        return []


@dataclass(frozen=True)
class BenchmarkType:
    """Everything the pipeline knows about a benchmark type, declared once in the benchmark's own module."""

    name: str                   #: the value of ``type:`` in ``benchmarks.<name>``
    settings: type              #: a frozen dataclass subclassing :class:`BenchmarkSettings`
    #: ``"package.module:Class"``, the :class:`~intact.data.base.Benchmark` subclass
    implementation: str
    description: str
    tasks: tuple[str, ...]      #: every task, in the default order (``domains`` may select and reorder them)
    num_classes: int
    required: tuple[str, ...] = ()  #: keys a config must set (a data root)
    splits: tuple[str, ...] = ()  #: named splits the type ships (the first is the default)
    check: BenchmarkCheck | None = None
    channels: int | None = None  #: image channels; checked (with ``image_size``) against the backbone when set
    #: ``backbones.<b>.pretrain.benchmark`` may name it: its implementation has :data:`PRETRAINING` (checked)
    pretrains: bool = False
    #: ``prepare(cfg, out_dir, workers=, progress=)`` decodes over the job's cores (rule ``prepare_images``);
    #: False: ``prepare(cfg, out_dir)`` in one process (rule ``prepare_data``)
    parallel_prepare: bool = True

    def __post_init__(self) -> None:
        where = f"benchmark {self.name!r}"
        if not (dataclasses.is_dataclass(self.settings) and issubclass(self.settings, BenchmarkSettings)):
            raise TypeError(f"{where}: settings must be a dataclass subclassing BenchmarkSettings, got "
                            f"{self.settings!r}")
        unknown = sorted(set(self.required) - set(settable(self.settings)))
        if unknown:
            raise TypeError(f"{where}: required {unknown} are not settable keys of {self.settings.__name__}")
        if not self.tasks or len(set(self.tasks)) != len(self.tasks):
            raise TypeError(f"{where}: tasks must name at least one task, each once (got {self.tasks!r})")
        if self.num_classes < 1:
            raise TypeError(f"{where}: num_classes must be >= 1 (got {self.num_classes!r})")
        _check_declaration(self)

    @property
    def settable(self) -> tuple[str, ...]:
        """The keys of ``benchmarks.<name>`` besides ``type`` and ``backbone``."""
        return settable(self.settings)

    def import_class(self) -> type:
        """The implementation class (imports it, and torch, on first use)."""
        return import_target(self.implementation)


def settable(settings: type) -> tuple[str, ...]:
    """The keys of a benchmark's ``settings`` a config may set: its fields but :data:`COMMON_KEYS` and those declared
    ``settable=False`` (:func:`~intact.settings.setting`)."""
    return tuple(f.name for f in settable_fields(settings) if f.name not in COMMON_KEYS)


def _check_declaration(decl: BenchmarkType) -> None:
    """A declaration checks itself when it is made (at import), as a method's does: its settings' defaults, of
    their type and in their bounds (:func:`intact.settings.check_declared`; a required key's and ``domains``'s
    stand for "not set": their type only), its implementation (:func:`intact.registry.check_implementation`; with
    ``pretrains``, its :data:`PRETRAINING` methods, read from source) and its ``check``'s signature."""
    where = f"benchmark {decl.name!r}"
    check_declared(decl.settings, where, skip=COMMON_KEYS, placeholders=("domains", *decl.required))
    check_implementation(decl.implementation, where)
    members = class_members(decl.implementation, "intact.data.base:Benchmark") if decl.pretrains else None
    missing = [m for m in PRETRAINING if members is not None and m not in members]
    if missing:
        raise TypeError(f"{where}: pretrains=True, but its implementation {decl.implementation!r} defines no "
                        f"{' and no '.join(m + '()' for m in missing)} (docs/adding-a-benchmark.md, Pretraining)")
    problem = hook_problem(decl.check, 1, "check(settings) -> [(key, problem), ...]") if decl.check else None
    if problem:
        raise TypeError(f"{where}: {problem}")


def benchmark_schema(decl: BenchmarkType) -> dict[str, Any]:
    """The JSON schema of a ``benchmarks.<name>`` entry of type ``decl.name``: the settable fields with their
    types, bounds and descriptions; ``domains`` limited to the declared tasks, each once; required keys take no
    null."""
    fields = fields_schema(decl.settings)
    props: dict[str, Any] = {"type": {"const": decl.name},
                             "backbone": {"description": "name of an entry under `backbones`", "type": "string"}}
    for key in decl.settable:
        prop = fields[key]
        if key == "domains":  # each a declared task, each once (a task twice: its data and results collide)
            prop["items"] = {**prop.get("items", {}), "enum": list(decl.tasks)}
            prop["uniqueItems"] = True
        if key in decl.required and isinstance(prop.get("type"), list):
            prop["type"] = [t for t in prop["type"] if t != "null"][0]
        props[key] = prop
    props["overrides"] = {"$ref": "#/$defs/section_overrides"}
    return {"description": decl.description, "type": "object", "additionalProperties": False,
            "required": ["type", "backbone", *decl.required], "properties": props}
