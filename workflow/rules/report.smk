rule report_default_run:
    """The default run (`run.methods` x `run.seeds`, not a study): mean +- std over seeds of AA / forgetting / BWT per method, InTAct's paired gain with its 95 % interval, and the AA-evolution plot."""
    input:
        metrics=run_metrics(PLAN.run.methods, PLAN.run.seeds),
        R=r_csv(run_metrics(PLAN.run.methods, PLAN.run.seeds)),
        code=script_code("report_main.py"),
    output:
        csv=report(DEFAULT_RUN_REPORT["csv"], caption="../report/main.rst", category="Default run", subcategory="{benchmark}"),
        md=DEFAULT_RUN_REPORT["md"],
        paired=report(DEFAULT_RUN_REPORT["paired"], caption="../report/paper_paired.rst", category="Default run", subcategory="{benchmark}"),
        plot=report(DEFAULT_RUN_REPORT["plot"], caption="../report/main_aa_evolution.rst", category="Default run", subcategory="{benchmark}"),
    log:
        "results/logs/report_default_run/{benchmark}.log",
    params:
        methods=list(PLAN.run.methods),
        config_hashes=stored_run_hashes,
    localrule: True
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/report_main.py"
