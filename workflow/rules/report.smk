rule report_main:
    """Mean +- std over seeds of AA / forgetting / BWT per method, and the AA-evolution plot."""
    input:
        metrics=lambda w: metrics_files(w.benchmark, config["run"]["methods"], config["run"]["seeds"]),
        code=REPORT_CODE,
    output:
        csv=report("results/tables/{benchmark}/main.csv", caption="../report/main.rst", category="Default run", subcategory="{benchmark}"),
        md="results/tables/{benchmark}/main.md",
        plot=report("results/figures/{benchmark}/aa_evolution.png", caption="../report/main_aa_evolution.rst", category="Default run", subcategory="{benchmark}"),
    log:
        "results/logs/report_main/{benchmark}.log",
    params:
        methods=config["run"]["methods"],
    localrule: True
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/report_main.py"
