"""What the report jobs read of a config, resolved once where the workflow validates it (no torch, no pandas).

The paper's tables and figures depend on a config only through :class:`ReportSettings`: which runs it declares
and the config hash each has now (a stored run of an older config is skipped), the main, integration and ablation
runs, the official protocol's rows, InTAct's λs, the backbones in words. The workflow builds it from the runs its
validation resolved (:func:`report_settings`) and hands its recorded form to the report jobs as one params entry,
``report`` (:mod:`intact.runtime.joblog` builds it back): a change that alters a table rebuilds it, no other does,
and no report job resolves a run. A study's report gets the one thing it needs of the config the same way: the
sensitivity study's default point on its benchmark (:func:`default_points`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping, Sequence

from intact.config import Resolver, backbone_config, resolver
from intact.models.named_backbones import describe
from intact.naming import TERMS, intact_pair, parse_method_name, with_intact, with_protocol
from intact.paths import RUN_KEY
from intact.plan import Plan, each_run
from intact.protocols import changes, same_as_default
from intact.settings import RunConfig, build_dataclass
from intact.settings.studies import MainStudy
from intact.studies import sensitivity_grid

#: The paper's benchmarks, in the order of its tables.
PAPER_BENCHMARKS = ("domainnet", "imagenet_r", "imagenet_c", "imagenet_mix")
#: the protocol whose runs the main table sets beside the paper's numbers (the paper copies KA-Prompt's)
OFFICIAL = "official"
#: the paper's InTAct run (CODA-P's): its ablation's, and the one whose λs (:data:`LAMBDAS`) the hyperparameter
#: table shows
PAPER_RUN = "coda_p+intact"
LAMBDAS = ("lambda_feat", "lambda_intdrift", "lambda_var", "lambda_align")

@dataclass(frozen=True)
class ReportSettings:
    """What the paper's tables and figures read of a config (:func:`report_settings`)."""

    benchmarks: tuple[str, ...]    #: ``run.benchmarks``
    main_methods: tuple[str, ...]  #: the main table's runs: the main study's methods, else the default run's
    #: each main-table run -> its run under the official protocol (None: it has none); None: no official column
    official: dict[str, str | None] | None
    #: base method -> the source that declares its official settings the default protocol's (``same_as_default``;
    #: empty without an official column)
    official_sources: dict[str, str]
    #: the integration table's runs, keyed as ``paper_numbers.yaml`` names its rows (:func:`integration_runs`)
    integration: dict[str, str]
    integration_studied: bool      #: an integration study is declared (else its table shows the main table's runs)
    ablation: dict[str, Any]       #: the ablation study, else the paper's (``coda_p+intact``, every term)
    sensitivity: dict[str, Any] | None  #: the sensitivity study, if declared
    #: each benchmark the hyperparameter table shows that the config defines -> :data:`PAPER_RUN`'s
    #: :data:`LAMBDAS` there (None: the run has no InTAct section)
    lambdas: dict[str, dict[str, Any] | None]
    declared: dict[str, dict[str, tuple[int, ...]]]  #: benchmark -> run -> seeds: every run the config declares
    hashes: dict[str, str]         #: each declared run's key (:data:`intact.paths.RUN_KEY`) -> its config hash now
    backbones: dict[str, str]      #: benchmark -> the backbone its runs run on, in words
    rehearsal: bool                #: a rehearsal's config (:mod:`intact.rehearsal`): every table says so


def report_settings(cfg: Mapping[str, Any], resolve: Resolver | None = None) -> ReportSettings:
    """``cfg`` (validated) as the report jobs read it; ``resolve``: its runs' settings (the workflow's
    :func:`intact.config.resolver` of the runs its validation resolved, so that none is resolved twice; default:
    resolved from ``cfg``)."""
    resolve = resolve or resolver(cfg)
    studies = cfg.get("studies") or {}
    declared = Plan(cfg).declared_runs()
    main = main_methods(cfg)
    official = official_runs(cfg, main)
    return ReportSettings(
        benchmarks=tuple(cfg["run"]["benchmarks"]), main_methods=tuple(main), official=official,
        official_sources=same_as_default(cfg, OFFICIAL) if official is not None else {},
        integration=integration_runs(studies.get("integration")),
        integration_studied=studies.get("integration") is not None,
        ablation=studies.get("ablation") or {"method": PAPER_RUN, "terms": list(TERMS)},
        sensitivity=studies.get("sensitivity"),
        lambdas={b: _lambdas(resolve(b, PAPER_RUN, 0)) for b in lambda_benchmarks(cfg["run"]["benchmarks"])
                 if b in cfg["benchmarks"]},
        declared=declared,
        hashes={RUN_KEY.format(benchmark=b, method=m, seed=s): resolve(b, m, s).hash()
                for b, m, s in each_run(declared)},
        backbones=backbone_descriptions(cfg, declared), rehearsal=cfg.get("rehearsal") is not None)


def lambda_benchmarks(benchmarks: Sequence[str]) -> list[str]:
    """The hyperparameter table's rows: the paper's benchmarks, then the other ``benchmarks`` the config runs."""
    return [*PAPER_BENCHMARKS, *(b for b in benchmarks if b not in PAPER_BENCHMARKS)]


def _lambdas(run: RunConfig) -> dict[str, Any] | None:
    return {k: getattr(run.intact, k) for k in LAMBDAS} if run.intact is not None else None


def main_methods(cfg: Mapping[str, Any]) -> list[str]:
    """Our runs in the main table: the main study's methods, else the default run's."""
    main = (cfg.get("studies") or {}).get("main")
    return list(main["methods"]) if main else list(cfg["run"]["methods"])


def official_runs(cfg: Mapping[str, Any], main: list[str]) -> dict[str, str | None] | None:
    """Each main-table run (``main``) -> its run under the ``official`` protocol, where the main study declares it:
    the run trained under it, or the default protocol's run where the protocol declares the two the same
    (``same_as_default``, with its source), else None (no official run: the cell says —)."""
    spec = (cfg.get("studies") or {}).get("main")
    if not spec or OFFICIAL not in build_dataclass(MainStudy, spec, "studies.main").protocols:
        return None
    same = same_as_default(cfg, OFFICIAL)
    out: dict[str, str | None] = {}
    for m in main:
        base = parse_method_name(m).base
        out[m] = with_protocol(m, OFFICIAL) if changes(cfg, OFFICIAL, base) else (m if base in same else None)
    return out


def integration_runs(spec: Mapping[str, Any] | None) -> dict[str, str]:
    """The integration table's runs, keyed as ``paper_numbers.yaml`` names its rows: each entry's plain run under
    its base method (``l2p``) and its InTAct run under ``<base>+intact`` (``l2p+intact`` ->
    ``l2p+intact@lambda_var=1e-2,lambda_feat=1e-1``: :func:`intact.naming.intact_pair`, as the study names them);
    a second entry of the same method under its own names. Without an integration study: L2P and DualPrompt."""
    out: dict[str, str] = {}
    for entry in spec["methods"] if spec else ["l2p", "dualprompt"]:
        plain, run = intact_pair(entry)
        base = parse_method_name(plain).base
        out.setdefault(base if base not in out else plain, plain)
        out.setdefault(with_intact(base) if with_intact(base) not in out else run, run)
    return out


def backbone_descriptions(cfg: Mapping[str, Any], declared: Mapping[str, Any]) -> dict[str, str]:
    """Benchmark (of ``declared``) -> its backbone in words (name, timm model and whose weights, input
    normalisation)."""
    out = {}
    for b in declared:
        name = cfg["benchmarks"][b].get("backbone")
        bb = cfg["backbones"].get(name, {})
        if "model" in bb:   # the normalisation the runs use: the declared default where the config sets none
            typed = backbone_config(cfg, name)
            out[b] = describe(name, typed.model, typed.input_mean, typed.input_std)
    return out


def default_points(resolve: Resolver, benchmark: str, spec: Mapping[str, Any]) -> dict[str, float | None]:
    """Per swept key of sensitivity study ``spec``, the value whose run is the study's method at its defaults on
    ``benchmark`` (the same resolved settings, apart from the name); None where the grid does not hold it."""
    def settings(name: str) -> dict[str, Any]:
        return {k: v for k, v in resolve(benchmark, name, 0).to_dict().items() if k != "method"}

    default = settings(spec["method"])
    return {key: next((v for v, name in points.items() if settings(name) == default), None)
            for key, points in sensitivity_grid(spec).items()}
