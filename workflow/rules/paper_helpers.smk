# Helpers of the paper rules (workflow/rules/paper.smk): outputs, and the inputs / params that keep
# `paper_tables` from ever scheduling training.
from intact.report.paper import declared_runs, files_digest, stored_files
from intact.report.paper_figures import FIGURES
from intact.report.paper_tables import PAPER_TABLES, TABLE_BLOCKS

PAPER_CODE = package_code("report/paper.py", "report/paper_tables.py", "report/render.py", "report/paper_figures.py",
                          "report/paper_numbers.yaml", "studies.py", "naming.py")
PAPER_SETTINGS = {k: config[k] for k in ("run", "studies", "benchmarks", "backbones", "methods", "head", "intact", "optim") if k in config}


def requested_runs(wildcards=None):
    """The run files (metrics.json, train.json) that the requested targets themselves produce: the paper
    outputs wait for them. Stored runs are read whatever the target, but through a content digest (a param),
    never as inputs - an input would let Snakemake retrain a copied run to refresh it."""
    targets = set(getattr(workflow.dag_settings, "targets", None) or ()) or {"all"}
    runs = {}
    if targets & {"all", "full"}:
        for b in config["run"]["benchmarks"]:
            runs.setdefault(b, {}).update({m: config["run"]["seeds"] for m in config["run"]["methods"]})
    for name, s in STUDIES.items():
        if targets & {"full", f"study_{name}"}:
            for b in config["run"]["benchmarks"]:
                runs.setdefault(b, {}).update({m: s.seeds for m in s.methods})
    files = []
    for b, methods in runs.items():
        for m, seeds in methods.items():
            for seed in seeds:
                files += [f"results/runs/{b}/{m}/seed{seed}/metrics.json"]
                files += [f"results/runs/{b}/{m}/seed{seed}/task{t}/train.json" for t in range(num_tasks(b))]
    return files


def stored_digest(wildcards=None):
    """Digest of the stored run files that are not inputs (inputs are tracked by Snakemake already; keeping
    them out makes a repeated `snakemake` find nothing to do)."""
    inputs = set(requested_runs())
    return files_digest(f for f in stored_files(config, "results") if str(f) not in inputs)


def paper_table_files():
    files = [f"results/tables/paper/{t}.{e}" for t in PAPER_TABLES for e in ("csv", "md", "tex")]
    return files + [f"results/tables/paper/{b}.csv" for t in PAPER_TABLES for b in TABLE_BLOCKS.get(t, ())]


def paper_figure_files(benchmark="{benchmark}"):
    return {f"{f}_{e}": f"results/figures/paper/{f}_{benchmark}.{e}" for f in FIGURES for e in ("png", "pdf")}


def paper_targets():
    return paper_table_files() + [p for b in config["run"]["benchmarks"] for p in paper_figure_files(b).values()]


def _table_outputs():
    out = {}
    for t in PAPER_TABLES:
        out[f"{t}_csv"] = report(f"results/tables/paper/{t}.csv", caption=f"../report/paper_{t}.rst",
                                 category="Paper tables", subcategory=t, labels={"table": t, "format": "CSV"})
        out[f"{t}_md"] = f"results/tables/paper/{t}.md"
        out[f"{t}_tex"] = report(f"results/tables/paper/{t}.tex", caption=f"../report/paper_{t}.rst",
                                 category="Paper tables", subcategory=t, labels={"table": t, "format": "LaTeX"})
        for b in TABLE_BLOCKS.get(t, ()):
            out[b] = report(f"results/tables/paper/{b}.csv", caption="../report/paper_paired.rst",
                            category="Paper tables", subcategory=t, labels={"table": b, "format": "CSV"})
    return out


def _figure_outputs():
    out = {}
    for f in FIGURES:
        out[f"{f}_png"] = report(f"results/figures/paper/{f}_{{benchmark}}.png", caption=f"../report/paper_{f}.rst",
                                 category="Paper figures", subcategory="{benchmark}", labels={"figure": f, "benchmark": "{benchmark}"})
        out[f"{f}_pdf"] = f"results/figures/paper/{f}_{{benchmark}}.pdf"
    return out
