"""Snakemake adapter: the paper's figures and the per-task diagnostics of one benchmark (PNG + PDF)."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.runtime.joblog import job
from intact.plan import PAPER_FIGURES
from intact.report.paper import stored_results
from intact.report.figures import paper_figures

with job(snakemake) as params:
    stored = stored_results(params.report, "results")
    outputs = {f: [snakemake.output[f"{f}_png"], snakemake.output[f"{f}_pdf"]] for f in PAPER_FIGURES}
    paper_figures(stored, snakemake.wildcards.benchmark, params.report.main_methods, params.report.sensitivity, outputs)
