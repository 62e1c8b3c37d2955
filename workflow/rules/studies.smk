# Reports of the studies declared under `studies:` in config.yaml, and their named targets:
#   snakemake study_main | study_integration | study_ablation | study_sensitivity | full
# One pair of rules per declared study, generated from the declarations (intact.studies expands them into
# runs, intact.plan into files; src/intact/report/studies.py writes each study's report); an undeclared
# study defines no rules.

for _study in STUDIES:

    rule:
        name:
            f"report_study_{_study}"
        input:
            metrics=run_metrics(STUDIES[_study].methods, STUDIES[_study].seeds),
            R=r_csv(run_metrics(STUDIES[_study].methods, STUDIES[_study].seeds)),
            code=script_code("report_study.py"),
        output:
            # every table and figure of the study enters the HTML report (`snakemake --report`), with a caption
            **{k: (v if k == "md" else report(v, caption=f"../report/study_{_study}.rst", category="Studies", subcategory="{benchmark}"))
               for k, v in report_files(_study, STUDIES[_study].spec).items()},
        log:
            f"results/logs/report_study_{_study}/{{benchmark}}.log",
        params:
            study=_study,
            spec=STUDIES[_study].spec,
            methods=list(STUDIES[_study].methods),
            defaults=study_defaults(_study),
            config_hashes=stored_run_hashes,
        localrule: True
        conda:
            "../../envs/intact.yaml"
        script:
            "../scripts/report_study.py"

    rule:
        name:
            f"study_{_study}"
        input:
            when_requested(PLAN.study_targets, _study),


rule full:
    """The default run, every declared study, and the paper's tables and figures over all of them."""
    input:
        when_requested(PLAN.full_targets),
        when_requested(PLAN.tune_static_targets),
        tune_targets,


rule reports:
    """Tables and figures from stored results only (R.csv / metrics.json / train.json / eval.json)."""
    input:
        stored_reports,
