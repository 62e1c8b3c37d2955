"""The default run's report and one report per study (tables + figures) of one benchmark, from stored runs
only (:func:`intact.results.read_run`), with the tables and figures the paper's report uses."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

from intact.rehearsal import banner
from intact.report import figures
from intact.report.completeness import Ledger
from intact.report.paper_tables import ablation_table
from intact.report.render import write_table
from intact.report.tables import integration_table, sensitivity_table, summary_table
from intact.results import StoredResults
from intact.studies import sensitivity_grid


def write_default_report(stored: StoredResults, methods: Sequence[str], outputs: Mapping[str, str],
                         benchmark: str) -> None:
    """The default run's table (``csv``, ``md``, and its paired block: ``paired``) and AA-evolution ``plot``."""
    title = f"{benchmark} ({_split(stored)} split)"
    write_table(summary_table("default_run", title, stored, benchmark, methods), outputs["csv"], outputs["md"],
                banner=banner(stored.is_rehearsal))
    figures.aa_evolution(stored, benchmark, methods, [outputs["plot"]], title=f"AA evolution - {benchmark}")


def write_study_report(name: str, spec: Mapping[str, Any], stored: StoredResults, outputs: Mapping[str, str],
                       benchmark: str, *, methods: Sequence[str] = (),
                       defaults: Mapping[str, float | None] | None = None) -> None:
    """Write the outputs of study ``name`` (keys: csv, md, and plot / figure paths) for ``benchmark``; ``methods``:
    the study's runs as the workflow planned them (:attr:`intact.studies.Study.methods`: the main study's under
    each protocol, one name where a protocol changes nothing); ``defaults``: the sensitivity study's default point
    there (:func:`intact.report.settings.default_points`)."""
    title = f"{benchmark} ({_split(stored)} split)"
    if name == "main":
        if not methods:
            raise ValueError("the main study's report needs its runs (methods=)")
        table = summary_table("study_main", f"Methods - {title}", stored, benchmark, methods)
        figures.aa_evolution(stored, benchmark, methods, [outputs["plot"]], title=f"AA evolution - {benchmark}")
    elif name == "integration":
        table = integration_table(f"InTAct on prompt methods - {title}", stored, benchmark, spec["methods"])
    elif name == "ablation":
        table = ablation_table(Ledger(f"study_ablation ({benchmark})", stored), spec, [benchmark],
                               f"Ablation of {spec['method']} - {title}")
    elif name == "sensitivity":
        if defaults is None:
            raise ValueError("the sensitivity study's report needs its default point (defaults=)")
        table = sensitivity_table(f"Sensitivity of {spec['method']} - {title}", stored, benchmark, spec, defaults)
        figures.sensitivity(stored, benchmark, spec, [outputs["figure"]], keys=list(spec["grid"]))
        for key in sensitivity_grid(spec):
            figures.sensitivity(stored, benchmark, spec, [outputs[f"figure_{key}"]], keys=[key])
    else:
        raise ValueError(f"unknown study {name!r}")
    write_table(table, outputs["csv"], outputs["md"], banner=banner(stored.is_rehearsal))


def _split(stored: StoredResults) -> str:
    """The split the runs were evaluated on (``test`` unless they are a search's validation runs)."""
    return stored.runs[0].metrics["eval_split"] if stored.runs else "test"
