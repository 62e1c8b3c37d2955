"""The studies, declared with :func:`setting`: their schema, defaults and reference come from here
(:mod:`intact.studies` and :mod:`intact.tune` expand them into runs)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

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
#: a value a run name can carry, a grid's or a random choice's (the name's own check refuses the rest)
NAME_VALUE = {"type": ["string", "number", "boolean", "null"]}
#: a search's ``baseline`` when it declares none: for an InTAct run, the same method without InTAct
#: (:func:`intact.naming.baseline`), else none
DERIVED_BASELINE = ""
#: the keys a tune search entry and its random search must set
SEARCH_REQUIRED, RANDOM_REQUIRED = ("run",), ("points", "space")


@dataclass(frozen=True)
class Distribution:
    """One setting's distribution in a random search: exactly one of its three keys (the schema says so)."""

    uniform: tuple[float, ...] | None = setting(
        None, "[low, high]", schema={"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "number"}})
    log_uniform: tuple[float, ...] | None = setting(
        None, "[low, high], uniform in log space",
        schema={"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "number", "exclusiveMinimum": 0}})
    choice: tuple[Any, ...] | None = setting(
        None, "values, each as likely", schema={"type": "array", "minItems": 1, "maxItems": 100, "items": NAME_VALUE})


@dataclass(frozen=True)
class RandomSearch:
    """Seeded random points (:func:`intact.tune.random_points`): distinct, each value rounded to 2 significant
    digits, the same on every machine."""

    points: int = setting(0, "how many", minimum=1, maximum=1000)
    seed: int = setting(0, "seeds `random.Random`", minimum=0)
    space: dict[str, Distribution] = setting(None, "a setting a name can override -> one of:",
                                             minProperties=1, items={"minProperties": 1, "maxProperties": 1})


@dataclass(frozen=True)
class TuneSearch:
    """One tuned run and its search points, a grid or seeded random points: exactly one of ``grid`` and ``random``
    (:func:`intact.tune.tune_section` refuses both or neither)."""

    run: str = setting("", "the tuned run", minLength=1)
    baseline: str | None = setting(DERIVED_BASELINE, "compared with the chosen point on test; \"\": for an InTAct run, "
                                   "the method without InTAct; null: none")
    grid: dict[str, tuple[Any, ...]] | None = setting(
        None, "a setting a name can override -> its values (each combination a point)",
        schema={"type": "object", "minProperties": 1, "maxProperties": 10,
                "additionalProperties": {"type": "array", "minItems": 1, "maxItems": 100, "uniqueItems": True,
                                         "items": NAME_VALUE}})
    random: RandomSearch | None = setting(None, "distinct points, values to 2 digits, the same on every machine",
                                          required=list(RANDOM_REQUIRED))


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
    searches: tuple[TuneSearch, ...] = setting((), "one per tuned run, with `grid` or `random`", minItems=1,
                                               maxItems=100, items={"required": list(SEARCH_REQUIRED)})


#: each study, and the keys it must set (null for a study switches it off)
STUDY_SETTINGS: dict[str, type] = {"main": MainStudy, "integration": IntegrationStudy, "ablation": AblationStudy,
                                   "sensitivity": SensitivityStudy, "tune": TuneSection}
STUDY_REQUIRED = {"main": ("methods",), "integration": ("methods",), "ablation": ("method", "terms"),
                  "sensitivity": ("method", "grid"), "tune": ("selection_seeds", "searches")}

#: the parts of a tune search entry (``studies.tune.searches[]``), each with the keys it must set
SEARCH_PARTS = ((TuneSearch, SEARCH_REQUIRED), (RandomSearch, RANDOM_REQUIRED), (Distribution, ()))

for _name, _cls in STUDY_SETTINGS.items():
    check_declared(_cls, f"section {_cls.__name__}", placeholders=STUDY_REQUIRED[_name])
for _cls, _required in SEARCH_PARTS:  # a None default: the key is not given (grid, random, a distribution's)
    check_declared(_cls, f"section {_cls.__name__}",
                   placeholders=(*_required, *(f.name for f in fields(_cls) if f.default is None)))
