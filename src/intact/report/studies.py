"""One report per study (tables + figures), from the runs' metrics.json only."""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from intact.report import plots, tables
from intact.studies import ablation_variants, expand_study, sensitivity_grid


def write_study_report(name: str, spec: Mapping[str, Any], runs: pd.DataFrame, outputs: Mapping[str, str], benchmark: str) -> None:
    """Write the outputs of study ``name`` (keys: csv, md, and plot / figure paths) for ``benchmark``."""
    split = runs["eval_split"].iloc[0]
    title = f"{benchmark} ({split} split)"
    if name == "main":
        methods = list(expand_study(name, spec, (0,)).methods)
        summary = tables.summarize_runs(runs, methods)
        tables.write_table(summary, tables.to_markdown(summary, title=f"Methods - {title}"), outputs["csv"], outputs["md"])
        plots.aa_evolution_plot(runs, outputs["plot"], methods, title=f"AA evolution - {benchmark}")
    elif name == "integration":
        table = tables.integration_table(runs, spec["methods"])
        tables.write_table(table, tables.integration_markdown(table, f"InTAct on prompt methods - {title}"), outputs["csv"], outputs["md"])
    elif name == "ablation":
        table = tables.ablation_table(runs, spec["method"], ablation_variants(spec))
        tables.write_table(table, tables.ablation_markdown(table, f"Ablation of {spec['method']} - {title}"), outputs["csv"], outputs["md"])
    elif name == "sensitivity":
        grid = sensitivity_grid(spec)
        table = tables.sensitivity_table(runs, grid)
        tables.write_table(table, tables.sensitivity_markdown(table, f"Sensitivity of {spec['method']} - {title}"), outputs["csv"], outputs["md"])
        per_family = {key: outputs[f"figure_{key}"] for key in grid}
        plots.sensitivity_plots(runs, grid, outputs["figure"], per_family)
    else:
        raise ValueError(f"unknown study {name!r}")
