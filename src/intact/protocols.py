"""Protocols and per-method settings: the layers a run's settings are merged from, declared once (no torch).

A *layer* is a mapping with any of the sections ``methods``, ``head``, ``intact`` and ``optim`` and, where it
belongs to one method under one protocol, a ``backbone`` (a name under ``backbones``). A run of method ``B``
under protocol ``P`` on benchmark ``b`` merges, least specific first::

    config sections -> benchmarks.b.overrides                       (every method, as before)
    -> protocols.P.per_method.B                                     (B's own budget and backbone under P)
    -> benchmarks.b.overrides.protocols.P.per_method.B              (the same, on this benchmark)
    -> the overrides in the run's name                              (intact.naming)

``P`` is the name's ``@protocol=<name>``, else ``intact`` (the default). The paper configs declare two
protocols (docs/protocols.md, "The two protocols"): ``intact`` (empty: the one budget of the config's
sections) and ``official`` (each main-table row's authors' budget and backbone). A layer that is absent
or empty changes nothing, so every run named before these layers existed keeps its settings and hash.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from intact.methods import METHODS
from intact.naming import DEFAULT_PROTOCOL
from intact.settings import OptimConfig

#: the sections a layer may set (the rest of a run's settings come from the benchmark and the backbone)
SECTIONS = ("methods", "head", "intact", "optim")
#: the ``optim`` keys that set a run's own view of prepared images (the official scripts' transforms; issue 32)
VIEW_KEYS = ("train_crop", "test_resize")
#: the ``optim`` keys ``intact runs`` shows where a run sets them
SHOWN_WHEN_SET = ("first_task_weight_decay", *VIEW_KEYS)


def declared(cfg: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The declared protocols (``protocols``), the default one always among them."""
    out = {DEFAULT_PROTOCOL: {}}
    out.update({k: (v or {}) for k, v in (cfg.get("protocols") or {}).items()})
    return out


def _per_method(layer: Mapping[str, Any], base: str) -> Mapping[str, Any]:
    return (layer.get("per_method") or {}).get(base) or {}


def run_layers(cfg: Mapping[str, Any], benchmark: str, base: str, protocol: str) -> list[Mapping[str, Any]]:
    """The layers of one run's settings, least specific first (the order in the module docstring)."""
    top = {s: cfg.get(s) or {} for s in SECTIONS}
    bench = cfg["benchmarks"][benchmark].get("overrides") or {}
    bench_proto = (bench.get("protocols") or {}).get(protocol) or {}
    return [top, bench, _per_method(declared(cfg)[protocol], base), _per_method(bench_proto, base)]


def _protocol_layers(cfg: Mapping[str, Any], protocol: str) -> list[Mapping[str, Any]]:
    """``protocols.<protocol>`` and every benchmark's refinement of it."""
    benches = [(b.get("overrides") or {}).get("protocols") or {} for b in cfg["benchmarks"].values()]
    return [declared(cfg)[protocol], *((p.get(protocol) or {}) for p in benches)]


def run_backbone(cfg: Mapping[str, Any], benchmark: str, layers: list[Mapping[str, Any]]) -> str:
    """The backbone a run uses: the last layer's that names one, else its benchmark's."""
    named = [layer["backbone"] for layer in layers if layer.get("backbone")]
    return named[-1] if named else cfg["benchmarks"][benchmark]["backbone"]


def changes(cfg: Mapping[str, Any], protocol: str, base: str) -> bool:
    """Whether ``protocol`` sets anything for runs of ``base`` (if not, its runs of ``base`` are the default
    protocol's runs: the same settings, so one run and one name). The default protocol: always True."""
    if protocol == DEFAULT_PROTOCOL or protocol not in declared(cfg):   # (an undeclared one fails at resolution)
        return True
    return any(_per_method(layer, base) for layer in _protocol_layers(cfg, protocol))


def same_as_default(cfg: Mapping[str, Any], protocol: str) -> dict[str, str]:
    """The methods ``protocol`` declares equal to the default protocol (``same_as_default``: base name -> the
    source that says so), where it and the benchmarks' refinements of it declare them."""
    out: dict[str, str] = {}
    for layer in _protocol_layers(cfg, protocol):
        out.update(layer.get("same_as_default") or {})
    return out


def problems(cfg: Mapping[str, Any]) -> list[str]:
    """Messages for every benchmark's layer of an undeclared protocol, every unknown method a ``same_as_default``
    names and every method a protocol declares the same as the default one while setting its settings."""
    out = [f"key 'benchmarks.{name}.overrides.protocols.{p}': protocol {p!r} is not declared under 'protocols' "
           f"(declared: {', '.join(declared(cfg))})" for name, bench in cfg["benchmarks"].items()
           for p in (bench.get("overrides") or {}).get("protocols") or {} if p not in declared(cfg)]
    out += [f"key 'protocols.{p}.same_as_default.{base}': unknown method {base!r} (methods: {', '.join(METHODS)})"
            for p in declared(cfg) for base in same_as_default(cfg, p) if not METHODS.declares(base)]
    return out + [f"key 'protocols.{p}.same_as_default.{base}': protocol {p!r} sets settings of {base!r} too; a row "
                  "is either its own run under the protocol or the default protocol's run, not both"
                  for p in declared(cfg) if p != DEFAULT_PROTOCOL
                  for base in same_as_default(cfg, p) if changes(cfg, p, base)]


def named_backbones(cfg: Mapping[str, Any]) -> set[str]:
    """Every backbone a per-method layer names (the benchmarks' own are checked apart)."""
    return {m["backbone"] for p in declared(cfg) for layer in _protocol_layers(cfg, p)
            for m in (layer.get("per_method") or {}).values() if (m or {}).get("backbone")}


def reads_prepared_images(optim: OptimConfig) -> bool:
    """Whether a run with these ``optim`` settings reads the images as prepared, the view a benchmark's query
    cache holds (another view trains and evaluates on the live path: :func:`intact.cache.variants`)."""
    return all(getattr(optim, k) == getattr(OptimConfig, k) for k in VIEW_KEYS)


def optimizer_name(run: Any) -> str:
    """The optimizer a run's jobs build: ``optim.optimizer`` where a layer sets it, else its method's own."""
    return run.optim.optimizer or METHODS[run.base].optimizer


def training_summary(run: Any) -> dict[str, Any]:
    """What a run trains with, as ``intact runs`` prints it: protocol, backbone, epochs per task, batch size,
    optimizer, lr schedule, learning rates (a method's own ``lr`` setting where it has one) and weight decay;
    the first task's weight decay and the view of the images where a run sets its own."""
    o, own = run.optim, run.settings
    own_lr, wd = getattr(own, "lr", None), getattr(own, "weight_decay", o.weight_decay)
    lr = own_lr if own_lr is not None else (o.lr_prompt if o.lr_head == o.lr_prompt else f"{o.lr_prompt}/{o.lr_head}")
    schedule = f"{o.schedule}{list(o.milestones)}" if o.schedule == "multistep" else o.schedule
    out = {"protocol": run.protocol, "backbone": run.backbone.name, "epochs": o.epochs, "batch": o.batch_size,
           "optimizer": optimizer_name(run), "schedule": schedule, "lr": lr, "weight_decay": wd}
    return out | {k: getattr(o, k) for k in SHOWN_WHEN_SET if getattr(o, k) != getattr(OptimConfig, k)}
