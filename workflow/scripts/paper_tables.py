"""Snakemake adapter: the paper's tables (CSV, Markdown, LaTeX) from the paper's numbers and stored runs."""
from intact.runtime.warm import hand_off

hand_off()  # before the imports: a warm parent runs this job in a fresh child (docs/design.md)

from intact.runtime.joblog import job
from intact.report.paper import stored_results
from intact.plan import PAPER_TABLES
from intact.report.paper_tables import paper_tables
from intact.rehearsal import banner
from intact.report.render import write_table

with job(snakemake) as params:
    stored = stored_results(params.report, "results")
    tables = paper_tables(params.report, stored)
    for name in PAPER_TABLES:
        out = snakemake.output
        write_table(tables[name], out[f"{name}_csv"], out[f"{name}_md"], out[f"{name}_tex"],
                    banner=banner(stored.is_rehearsal))
    print(f"{len(stored.runs)} stored runs, {len(stored.stale)} of an older config skipped")
