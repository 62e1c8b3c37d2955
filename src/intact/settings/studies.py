"""The studies declared with :func:`setting`: ``studies.main``, ``studies.integration`` and ``studies.ablation`` (their
schema, defaults and reference come from here; :mod:`intact.studies` expands them into runs). ``sensitivity`` and
``tune`` hold mappings of grids, which a declaration cannot express: config.schema.yaml has them."""

from __future__ import annotations

from dataclasses import dataclass
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


#: each study declared here, and the keys it must set (null for a study switches it off)
STUDY_SETTINGS: dict[str, type] = {"main": MainStudy, "integration": IntegrationStudy, "ablation": AblationStudy}
STUDY_REQUIRED = {"main": ("methods",), "integration": ("methods",), "ablation": ("method", "terms")}

for _name, _cls in STUDY_SETTINGS.items():
    check_declared(_cls, f"section {_cls.__name__}", placeholders=STUDY_REQUIRED[_name])
