# Reports of the studies declared under `studies:` in config.yaml, and their named targets:
#   snakemake study_main | study_integration | study_ablation | study_sensitivity | full
# A study that the config does not declare defines no rules.

if "main" in STUDIES:

    rule report_methods:
        """Every method of the main study: mean +- std over seeds, and AA evolution."""
        input:
            metrics=lambda w: metrics_files(w.benchmark, STUDIES["main"].methods, STUDIES["main"].seeds),
            code=REPORT_CODE,
        output:
            csv="results/tables/{benchmark}/methods.csv",
            md="results/tables/{benchmark}/methods.md",
            plot="results/figures/{benchmark}/methods_aa_evolution.png",
        log:
            "results/logs/report_methods/{benchmark}.log",
        params:
            study="main",
            spec=STUDIES["main"].spec,
        localrule: True
        conda:
            "../../envs/intact.yaml"
        script:
            "../scripts/report_study.py"

    rule study_main:
        input:
            study_targets("main"),


if "integration" in STUDIES:

    rule report_integration:
        """Each prompt method with and without InTAct."""
        input:
            metrics=lambda w: metrics_files(w.benchmark, STUDIES["integration"].methods, STUDIES["integration"].seeds),
            code=REPORT_CODE,
        output:
            csv="results/tables/{benchmark}/integration.csv",
            md="results/tables/{benchmark}/integration.md",
        log:
            "results/logs/report_integration/{benchmark}.log",
        params:
            study="integration",
            spec=STUDIES["integration"].spec,
        localrule: True
        conda:
            "../../envs/intact.yaml"
        script:
            "../scripts/report_study.py"

    rule study_integration:
        input:
            study_targets("integration"),


if "ablation" in STUDIES:

    rule report_ablation:
        """The full InTAct method and each loss term switched off alone, with the AA change."""
        input:
            metrics=lambda w: metrics_files(w.benchmark, STUDIES["ablation"].methods, STUDIES["ablation"].seeds),
            code=REPORT_CODE,
        output:
            csv="results/tables/{benchmark}/ablation.csv",
            md="results/tables/{benchmark}/ablation.md",
        log:
            "results/logs/report_ablation/{benchmark}.log",
        params:
            study="ablation",
            spec=STUDIES["ablation"].spec,
        localrule: True
        conda:
            "../../envs/intact.yaml"
        script:
            "../scripts/report_study.py"

    rule study_ablation:
        input:
            study_targets("ablation"),


if "sensitivity" in STUDIES:

    rule report_sensitivity:
        """AA evolution per lambda value, one panel per lambda family."""
        input:
            metrics=lambda w: metrics_files(w.benchmark, STUDIES["sensitivity"].methods, STUDIES["sensitivity"].seeds),
            code=REPORT_CODE,
        output:
            csv="results/tables/{benchmark}/sensitivity.csv",
            md="results/tables/{benchmark}/sensitivity.md",
            figure="results/figures/{benchmark}/sensitivity.png",
            **{
                f"figure_{key}": f"results/figures/{{benchmark}}/sensitivity_{key}.png"
                for key in sensitivity_grid(STUDIES["sensitivity"].spec)
            },
        log:
            "results/logs/report_sensitivity/{benchmark}.log",
        params:
            study="sensitivity",
            spec=STUDIES["sensitivity"].spec,
        localrule: True
        conda:
            "../../envs/intact.yaml"
        script:
            "../scripts/report_study.py"

    rule study_sensitivity:
        input:
            study_targets("sensitivity"),


rule full:
    """The default run and every declared study."""
    input:
        all_targets(),
        [f for s in STUDIES for f in study_targets(s)],


rule reports:
    """Tables and figures from stored results only (R.csv / metrics.json / train.json / eval.json)."""
    input:
        stored_reports,
