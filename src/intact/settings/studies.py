"""The studies, declared with :func:`setting`: their schema, defaults and reference come from here
(:mod:`intact.studies` and :mod:`intact.tune` expand them into runs). What a type cannot say, a tune search entry
(a grid or seeded random points), is config.schema.yaml's ``$defs/tune_search``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping

from intact.naming import DEFAULT_PROTOCOL, TERMS
from intact.settings.fields import check_declared, setting


def _seeds() -> Any:
    return setting(None, "null: `studies.seeds`, else `run.seeds`", minItems=1, maxItems=100, uniqueItems=True,
                   items={"minimum": 0})


def _methods() -> Any:
    return setting((), "run names", minItems=1, maxItems=500, uniqueItems=True)


@dataclass(frozen=True)
class MainStudy:
    """The main table: every method under every protocol listed."""

    methods: tuple[str, ...] = _methods()
    seeds: tuple[int, ...] | None = _seeds()
    protocols: tuple[str, ...] = setting((DEFAULT_PROTOCOL,), "a method a protocol sets nothing for is its intact run",
                                         minItems=1, maxItems=20, uniqueItems=True)


@dataclass(frozen=True)
class IntegrationStudy:
    """Prompt methods with and without `+intact`."""

    methods: tuple[str, ...] = _methods()
    seeds: tuple[int, ...] | None = _seeds()


@dataclass(frozen=True)
class AblationStudy:
    """The full method, then each listed InTAct term switched off alone."""

    method: str = setting("", "an InTAct run", minLength=1)
    terms: tuple[str, ...] = setting((), " | ".join(TERMS), minItems=1, maxItems=len(TERMS), uniqueItems=True,
                                     items={"enum": list(TERMS)})
    seeds: tuple[int, ...] | None = _seeds()


@dataclass(frozen=True)
class SensitivityStudy:
    """One λ at a time over a grid: one figure panel per λ."""

    method: str = setting("", "an InTAct run", minLength=1)
    grid: dict[str, tuple[float, ...]] = setting(None, "a λ of `intact` -> its values (each ≥ 0)", minProperties=1,
                                                 propertyNames={"enum": [f"lambda_{t}" for t in TERMS]},
                                                 items={"minItems": 2, "maxItems": 100, "uniqueItems": True,
                                                        "items": {"minimum": 0}})
    seeds: tuple[int, ...] | None = _seeds()


#: how ties in mean validation AA are broken (points within ``tolerance`` of the best tie); the first is the default
TIE_RULES = ("first", "min_forgetting")


@dataclass(frozen=True)
class TuneSection:
    """Honest tuning: [lambda-search.md](lambda-search.md)."""

    benchmarks: tuple[str, ...] | None = setting(None, "null: `run.benchmarks`", minItems=1, maxItems=50,
                                                 uniqueItems=True)
    seeds: tuple[int, ...] | None = _seeds()
    selection_seeds: tuple[int, ...] = setting((), "every search point's (validation split)", minItems=2,
                                               maxItems=100, uniqueItems=True, items={"minimum": 0})
    tie: str = setting(TIE_RULES[0], "among points within `tolerance` of the best", enum=list(TIE_RULES))
    tolerance: float = setting(0.0, "AA points", minimum=0)
    searches: tuple[Mapping[str, Any], ...] = setting(
        (), "one per tuned run",
        schema={"type": "array", "minItems": 1, "maxItems": 100, "items": {"$ref": "#/$defs/tune_search"}})


#: each study, and the keys it must set (null for a study switches it off)
STUDY_SETTINGS: dict[str, type] = {"main": MainStudy, "integration": IntegrationStudy, "ablation": AblationStudy,
                                   "sensitivity": SensitivityStudy, "tune": TuneSection}
STUDY_REQUIRED = {"main": ("methods",), "integration": ("methods",), "ablation": ("method", "terms"),
                  "sensitivity": ("method", "grid"), "tune": ("selection_seeds", "searches")}

for _name, _cls in STUDY_SETTINGS.items():
    check_declared(_cls, f"section {_cls.__name__}", placeholders=STUDY_REQUIRED[_name])
