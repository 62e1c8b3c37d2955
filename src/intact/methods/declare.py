"""How a method declares itself: one :class:`Method` object per method module, torch-free.

A method module (``intact/methods/<name>.py``, or a module of another package registered under the
entry-point group ``intact.methods``) holds, in this order: its settings dataclass (types, defaults, and
bounds / descriptions as field metadata via :func:`intact.settings.setting`), its consistency checks, and::

    METHOD = Method("my_method", MySettings, "intact.methods.impl.my_method:MyMethod", "one line for the docs",
                    accepts_intact=True, layer_keys=("layers",), check=check)

Its implementation is a module-level class in a module that imports torch (``intact/methods/impl/<name>.py``),
named by that string and imported only by a job: validating a config never imports torch.

Everything else is derived from these declarations (docs/adding-a-method.md): the registry
(:mod:`intact.methods`), the ``methods`` part of the config schema (:func:`settings_schema`), every
default of ``methods.<name>`` (a run's typed settings), the early checks (:mod:`intact.checks`) and the
configuration reference (docs/configuration.md, :mod:`intact.config_docs`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Iterable, Iterator

from intact.naming import MethodNameError, parse_method_name
from intact.registry import accepts, check_implementation, hook_problem, import_target
from intact.settings import OPTIMIZERS, check_declared, section_schema

#: ``check(settings, benchmark, backbone) -> [(key, problem), ...]``: the method's own consistency checks,
#: run at config validation (and again when a job builds the method). ``benchmark``: the run's
#: :class:`~intact.settings.BenchmarkConfig` (``num_tasks``, ...); ``backbone``: what the settings must fit,
#: ``depth`` (blocks 0..depth-1), ``embed_dim`` (width) and ``num_heads`` (an :class:`intact.models.arch.Arch`
#: at validation, the built backbone in a job)
Check = Callable[[Any, Any, Any], Iterable[tuple[str, str]]]
#: how the messages spell :data:`Check`
CHECK_SIGNATURE = "check(settings, benchmark, backbone) -> [(key, problem), ...]"


@dataclass(frozen=True)
class Method:
    """Everything the pipeline knows about a method, declared once in the method's own module."""

    name: str                   #: the base of its run names (``<name>``, ``<name>+intact``, ``<name>@...``)
    settings: type              #: a frozen dataclass: the keys of ``methods.<name>``, with defaults and bounds
    #: ``"package.module:Class"``: its module imports torch, so only a job imports it
    implementation: str
    description: str
    accepts_intact: bool = False  #: ``<name>+intact`` is a valid run (InTAct's terms join the loss)
    #: why ``<name>+intact`` is refused (the config checks say it), for a method that does not accept it
    intact_refusal: str = ""
    layer_keys: tuple[str, ...] = ()  #: keys that list backbone blocks (checked against the backbone's depth)
    check: Check | None = None
    #: penalties composed around the loss (:data:`intact.methods.shared.penalties.PENALTIES`), in the order
    #: their terms are added; InTAct's comes last, with ``+intact``
    penalties: tuple[str, ...] = ()
    #: False: every task starts from a fresh model (joint); the job loads neither the previous state nor
    #: its hypercubes, and the workflow schedules the tasks independently
    loads_previous_state: bool = True
    uses_backbone: bool = True  #: False: the method trains a whole network of its own (no frozen ViT)
    #: the optimizer its code builds (one of :data:`OPTIMIZERS`; fresh at every task); a config's
    #: ``optim.optimizer`` (e.g. a protocol's, per method) replaces it
    optimizer: str = "adam"

    def __post_init__(self) -> None:
        if not dataclasses.is_dataclass(self.settings):
            raise TypeError(f"method {self.name!r}: settings must be a dataclass, got {self.settings!r}")
        unknown = set(self.layer_keys) - {f.name for f in dataclasses.fields(self.settings)}
        if unknown:
            raise TypeError(f"method {self.name!r}: layer_keys {sorted(unknown)} are not settings")
        if self.optimizer not in OPTIMIZERS:
            raise TypeError(f"method {self.name!r}: optimizer {self.optimizer!r} is not one of {OPTIMIZERS}")
        if self.intact_refusal and self.accepts_intact:
            raise TypeError(f"method {self.name!r}: accepts '+intact' yet gives a reason to refuse it")
        if not _is_base_name(self.name):
            raise TypeError(f"method {self.name!r}: name {self.name!r} is not a method name (lower case letters, "
                            "digits and _, starting with a letter)")

        _check_declaration(self)

    def import_class(self) -> type:
        """The implementation class (imports it, and torch, on first use)."""
        return import_target(self.implementation)


def _is_base_name(name: str) -> bool:
    try:
        return parse_method_name(name).base == name
    except MethodNameError:
        return False


def _check_declaration(method: Method) -> None:
    """A declaration checks itself when it is made (at import): its settings (:func:`intact.settings.check_declared`)
    and its implementation (:func:`intact.registry.check_implementation`)."""
    where = f"method {method.name!r}"
    check_declared(method.settings, where)
    check_implementation(method.implementation, where, method=True)
    problem = hook_problem(method.check, 3, CHECK_SIGNATURE) if method.check is not None else None
    if problem and accepts(method.check, 2):   # check(settings, benchmark): the form of 0.1 before the backbone
        problem += ("; removed in version 0.2.0: the two-argument check(settings, benchmark) is "
                    "check(settings, benchmark, backbone) (CHANGELOG.md)")
    if problem:
        raise TypeError(f"{where}: {problem}")


def problems(method: Method, settings: Any, benchmark: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    """(key, problem) of every setting that does not fit: a block that ``layer_keys`` list twice, in two of them
    or past the backbone's depth, then the method's own :data:`Check`. ``backbone`` has ``depth`` (and
    ``embed_dim``, ``num_heads``); a method with ``uses_backbone=False`` is checked against the benchmark only."""
    depth = getattr(backbone, "depth", None) if method.uses_backbone else None
    seen: dict[int, str] = {}
    for key in method.layer_keys:
        blocks = list(getattr(settings, key) or [])
        twice = sorted({b for b in blocks if blocks.count(b) > 1})
        if twice:
            yield key, f"lists block {twice[0]} twice"
        both = sorted(b for b in set(blocks) if b in seen)
        if both:
            yield key, f"blocks {both} are in {seen[both[0]]} too: each block gets one kind of prompt"
        seen.update({b: key for b in blocks if b not in seen})
        if depth is not None and blocks and max(blocks) >= depth:
            yield key, f"block {max(blocks)} does not exist: the backbone has depth {depth} (blocks 0-{depth - 1})"
    if method.check is not None:
        yield from method.check(settings, benchmark, backbone if method.uses_backbone else None)


# --------------------------------------------------------------------------------------------------
# Derived: the schema


def settings_schema(method: Method) -> dict[str, Any]:
    """The JSON schema of ``methods.<name>``: one property per field, its type, bounds and description."""
    return section_schema(method.settings, method.description)
