"""The settings layer: how a setting is declared, and the sections every run shares (no torch; imports only
the foundations).

A setting is a field of a frozen dataclass declared with :func:`setting`: its type, default, a one-line
description and JSON-schema bounds. Everything else about it is derived from that one declaration
(:mod:`intact.settings.fields`): the config schema (:func:`section_schema`), the defaults a run gets, the
configuration reference (docs/configuration.md) and whether the key enters a run's hash at its default
(``later``). The same mechanism declares a method's settings (:mod:`intact.methods.declare`), a benchmark type's
(:mod:`intact.data.declare`) and the shared sections (:mod:`intact.settings.sections`: ``head``, ``intact``,
``optim``, ``backbones.<b>`` with its ``pretrain``, ``tracking``). :class:`RunConfig` is one run's settings,
typed, from resolution (:mod:`intact.config`) to the job: its plain form (:meth:`RunConfig.to_dict`) is what a
job receives and what the run's hash is taken of.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from intact.hashing import stable_hash
from intact.naming import DEFAULT_PROTOCOL
from intact.settings.fields import (
    BOUND_KEYWORDS, INT_MAX, INT_MIN, ConfigError, build_dataclass, check_declared, defaults, fields_schema, plain,
    recorded, section_schema, setting, settable_fields, validator,
)
from intact.settings.sections import (
    BACKBONE_REQUIRED, EVAL_SPLITS, INTACT_PRESETS, OPTIMIZERS, RUN_REQUIRED, SCHEDULES, SECTIONS, BackboneConfig,
    HeadConfig, IntactConfig, OptimConfig, PretrainConfig, RehearsalConfig, RunSection, TrackingConfig,
    section_defaults,
)

__all__ = [
    "BOUND_KEYWORDS", "INT_MAX", "INT_MIN", "ConfigError", "build_dataclass", "check_declared", "defaults",
    "fields_schema", "plain", "recorded", "section_schema", "setting", "settable_fields", "validator",
    "BACKBONE_REQUIRED", "EVAL_SPLITS", "RUN_REQUIRED", "RunSection",
    "INTACT_PRESETS", "OPTIMIZERS", "SCHEDULES", "SECTIONS", "BackboneConfig", "HeadConfig", "IntactConfig",
    "OptimConfig", "PretrainConfig", "RehearsalConfig", "TrackingConfig", "section_defaults", "RunConfig",
]


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one run's results (benchmark x method x seed), typed: built once by
    :func:`intact.config.resolve_run`, handed to the job as :meth:`to_dict` (Snakemake's ``params``, so a
    changed setting reruns the run) and rebuilt there by :func:`intact.config.run_from_dict`."""

    #: the settings class its benchmark type declares (a :class:`~intact.data.declare.BenchmarkSettings`)
    benchmark: Any
    backbone: BackboneConfig
    method: str
    base: str
    intact: IntactConfig | None
    settings: Any  #: the base method's own section, ``methods.<base>``: an instance of its declared dataclass
    head: HeadConfig
    optim: OptimConfig
    seed: int
    eval_split: str = EVAL_SPLITS[0]
    #: the protocol the run is trained under (``@protocol=<name>``); the default one is left out of the hash
    protocol: str = setting(DEFAULT_PROTOCOL, later=True)
    #: a rehearsal's run (``rehearsal:`` in the config, intact.rehearsal): recorded, so every table of it says so
    rehearsal: bool = setting(False, later=True)
    #: the plugins the run uses (:class:`intact.plugins.Plugin`, as text: distribution, version, digest of its
    #: files): a changed plugin reruns its runs; none for a built-in run, whose hash so never depends on plugins
    plugins: tuple[str, ...] = setting((), later=True)

    def to_dict(self) -> dict[str, Any]:
        """The run's plain form (job params, hash): :func:`recorded` - keys declared ``later`` are left out
        while at their default, so a new option never makes Snakemake redo finished runs."""
        return recorded(self)

    def hash(self) -> str:
        """A short hash of every setting (seed included)."""
        return stable_hash(self.to_dict())
