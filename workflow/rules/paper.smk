# The paper's tables and figures, in the paper's shape, with its reported numbers beside ours
# (src/intact/report/paper*.py; the numbers: src/intact/report/paper_numbers.yaml).
#   snakemake paper_tables      every paper table + figure from whatever is under results/: never trains
#   snakemake --report results/report.html     the HTML report of every table and figure
include: "paper_helpers.smk"


rule report_paper_tables:
    """The paper's five tables: paper | here | Δ, as CSV, Markdown and LaTeX."""
    input:
        runs=requested_runs,
        code=script_code("paper_tables.py"),
    output:
        **_table_outputs(),
    log:
        "results/logs/report_paper_tables/paper.log",
    params:
        stored=stored_digest,
        report=report_params,
    localrule: True
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/paper_tables.py"


rule report_paper_figures:
    """AA evolution, sensitivity panels and the per-task diagnostics of one benchmark (PNG + PDF)."""
    input:
        runs=requested_runs,
        code=script_code("paper_figures.py"),
    output:
        **_figure_outputs(),
    log:
        "results/logs/report_paper_figures/{benchmark}.log",
    params:
        stored=stored_digest,
        report=report_params,
    localrule: True
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/paper_figures.py"


rule paper_tables:
    """Every paper table and figure from whatever is under results/ plus the paper's numbers (no training)."""
    input:
        when_requested(PLAN.paper_targets),
