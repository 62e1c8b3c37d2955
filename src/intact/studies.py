"""Studies declared in config.yaml expand into named runs (no hand-written per-variant rules or paths).

::

    studies:
      seeds: [0, 1, 2]
      main:        {methods: [finetune, ewc, ..., coda_p+intact, joint]}
      # protocols: [intact, official] runs each method under both (esn, esn@protocol=official);
      # a method that a protocol sets nothing for is the same run under both (intact.protocols.changes)
      integration: {methods: [l2p, dualprompt, coda_p]}          # each with and without +intact
      # an entry may carry the InTAct variant's own settings: l2p@lambda_var=1e-2 -> l2p, l2p+intact@lambda_var=1e-2
      # (intact.naming.intact_pair; settings outside `intact` go to both runs)
      ablation:    {method: coda_p+intact, terms: [intdrift, var, align, feat]}
      sensitivity: {method: coda_p+intact, seeds: [0, 1], grid: {lambda_intdrift: [...], ...}}

Every expanded name follows the method-name grammar (:mod:`intact.naming`), so each variant is an
ordinary run with its own folder; :mod:`intact.plan` turns the runs into files. This module imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Mapping

from intact.naming import MethodNameError, ablation_name, intact_pair, parse_method_name, sweep_name, with_protocol
from intact.protocols import changes
from intact.settings import ConfigError, build_dataclass
from intact.settings.studies import STUDY_SETTINGS

STUDIES = ("main", "integration", "ablation", "sensitivity")


@dataclass(frozen=True)
class Study:
    """One study: its runs (method names) and seeds."""

    name: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    spec: Mapping[str, Any]


def protocol_runs(methods: list[str], protocols: list[str], applies: Callable[[str, str], bool]) -> list[str]:
    """Every method under every protocol, in that order; a method that ``applies(protocol, method)`` says
    the protocol changes nothing for keeps its default-protocol name (one run, not two of equal settings)."""
    return [with_protocol(m, p) if applies(p, m) else m for p in protocols for m in methods]


def expand_study(name: str, spec: Mapping[str, Any], default_seeds: tuple[int, ...],
                 applies: Callable[[str, str], bool]) -> Study:
    """The runs of study ``name`` (``applies``: see :func:`protocol_runs`; no default, since a protocol that changes
    nothing for a method gives no run of its own), read from its typed declaration."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; expected one of {', '.join(STUDIES)}")
    study = build_dataclass(STUDY_SETTINGS[name], spec, f"studies.{name}")
    try:
        methods = _study_runs(name, study, applies)
    except MethodNameError as e:  # a name that does not parse: refused here, where its key is known
        raise ConfigError(f"config: {e} (declared in studies.{name})") from None
    seeds = tuple(study.seeds or default_seeds)  # a declared study's null: the default seeds
    return Study(name, tuple(dict.fromkeys(methods)), seeds, spec)


def _study_runs(name: str, study: Any, applies: Callable[[str, str], bool]) -> list[str]:
    """The run names of a typed study, in order (repeats included)."""
    if name == "main":
        return protocol_runs(list(study.methods), list(study.protocols), applies)
    if name == "integration":
        return [m for entry in study.methods for m in intact_pair(entry)]
    if name == "ablation":
        return [study.method] + [ablation_name(study.method, t) for t in study.terms]
    return [sweep_name(study.method, key, v) for key, values in study.grid.items() for v in values]  # sensitivity


def default_seeds(cfg: Mapping[str, Any]) -> tuple[int, ...]:
    """The seeds of a study that names none: ``studies.seeds``, else ``run.seeds``."""
    return tuple((cfg.get("studies") or {}).get("seeds") or cfg["run"]["seeds"])


def expand_studies(cfg: Mapping[str, Any]) -> dict[str, Study]:
    """All studies declared under ``studies`` in the config (an empty dict if none)."""
    studies = cfg.get("studies") or {}
    seeds = default_seeds(cfg)
    def applies(protocol: str, method: str) -> bool:
        return changes(cfg, protocol, parse_method_name(method).base)

    # null switches off a study declared by a config this one is layered on (--configfile over config.yaml)
    return {n: expand_study(n, studies[n], seeds, applies) for n in STUDIES if studies.get(n) is not None}


def ablation_variants(spec: Mapping[str, Any]) -> dict[str, str]:
    """term -> run name of the ablation without that term."""
    return {t: ablation_name(spec["method"], t) for t in spec["terms"]}


def sensitivity_grid(spec: Mapping[str, Any]) -> dict[str, dict[float, str]]:
    """lambda -> {value: run name} of a sensitivity study."""
    return {key: {float(v): sweep_name(spec["method"], key, v) for v in values} for key, values in spec["grid"].items()}
