# Helpers of the paper rules (workflow/rules/paper.smk): outputs, and the inputs / params that keep
# `paper_tables` from ever scheduling training. The file names come from intact.plan.
from intact.plan import PAPER_FIGURES, PAPER_TABLES, TABLE_BLOCKS, paper_figure_file, paper_table_file
from intact.hashing import files_digest


def requested_runs(wildcards=None):
    """The run records (metrics.json, R.csv, eval.json, train.json) that the requested targets themselves produce: the paper
    outputs wait for them. Stored runs are read whatever the target, but through a content digest (a param),
    never as inputs - an input would let Snakemake retrain a copied run to refresh it. The targets are
    Snakemake's own DAG settings (`snakemake` alone: `all`). Target `reports` (make reports) collects its stored runs
    again: the paper outputs wait for those jobs too (PLAN.recollected)."""
    targets = getattr(workflow.dag_settings, "targets", None) or ()
    return PLAN.record_files(PLAN.requested_runs(targets)) + PLAN.recollected(targets, os.path.exists)


def stored_digest(wildcards=None):
    """Digest of the stored run files that are not inputs (inputs are tracked by Snakemake already; keeping
    them out makes a repeated `snakemake` find nothing to do)."""
    inputs = set(requested_runs())
    return files_digest(f for f in PLAN.stored_records(os.path.exists) if f not in inputs)


def _table_outputs():
    out = {}
    for t in PAPER_TABLES:
        out[f"{t}_csv"] = report(paper_table_file(t, "csv"), caption=f"../report/paper_{t}.rst",
                                 category="Paper tables", subcategory=t, labels={"table": t, "format": "CSV"})
        out[f"{t}_md"] = paper_table_file(t, "md")
        out[f"{t}_tex"] = report(paper_table_file(t, "tex"), caption=f"../report/paper_{t}.rst",
                                 category="Paper tables", subcategory=t, labels={"table": t, "format": "LaTeX"})
        for b in TABLE_BLOCKS.get(t, ()):
            out[b] = report(paper_table_file(b, "csv"), caption="../report/paper_paired.rst",
                            category="Paper tables", subcategory=t, labels={"table": b, "format": "CSV"})
    return out


def _figure_outputs():
    out = {}
    for f in PAPER_FIGURES:
        out[f"{f}_png"] = report(paper_figure_file(f, "{benchmark}", "png"), caption=f"../report/paper_{f}.rst",
                                 category="Paper figures", subcategory="{benchmark}", labels={"figure": f, "benchmark": "{benchmark}"})
        out[f"{f}_pdf"] = paper_figure_file(f, "{benchmark}", "pdf")
    return out
