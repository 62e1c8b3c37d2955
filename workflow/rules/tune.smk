# The tune study (`snakemake study_tune`; intact.tune, docs/lambda-search.md): every declared search's points
# train on the validation split as ordinary runs (their names end in `run.eval_split=val`), the checkpoint
# tune_select picks one point per search from their validation metrics only, and the chosen point then runs
# on the test split over the final seeds, beside its baseline. An undeclared tune study defines no rules.
from intact.plan import TUNE_CHOICE, TUNE_REPORT

if TUNE:

    checkpoint tune_select:
        """Choose one search's point by mean validation AA over the selection seeds (tie rule declared)."""
        input:
            metrics=tune_search_metrics,
            R=r_csv(tune_search_metrics),
            code=script_code("tune_select.py"),
        output:
            choice=TUNE_CHOICE,
        log:
            "results/logs/tune_select/{benchmark}/{tuned}.log",
        params:
            points=lambda w: TUNE.search(w.tuned).val_names,
            config_hashes=stored_run_hashes,
            selection=TUNE.selection_seeds,
            tie=[TUNE.tie, TUNE.tolerance],
            # what the choice records beside: the baseline its report compares with, the final seeds
            baseline=lambda w: TUNE.search(w.tuned).baseline,
            seeds=TUNE.seeds,
            study=TUNE,  # typed: not in the record (the plain values above are)
        wildcard_constraints:
            benchmark=one_of(TUNE.benchmarks),
            tuned=one_of([s.run for s in TUNE.searches]),
        localrule: True
        conda:
            "../../envs/intact.yaml"
        script:
            "../scripts/tune_select.py"

    rule report_study_tune:
        """The study's tables: each choice, and the chosen points against their baselines seed by seed."""
        input:
            # every choice listed on its own, so that all searches are scheduled at once
            choices=lambda w: [TUNE_CHOICE.format(benchmark=w.benchmark, tuned=s.run) for s in TUNE.searches],
            metrics=tune_report_metrics,
            R=r_csv(tune_report_metrics),
            code=script_code("report_tune.py"),
        output:
            **TUNE_REPORT,
        log:
            "results/logs/report_study_tune/{benchmark}.log",
        params:
            seeds=TUNE.seeds,
            config_hashes=stored_run_hashes,
        wildcard_constraints:
            benchmark=one_of(TUNE.benchmarks),
        localrule: True
        conda:
            "../../envs/intact.yaml"
        script:
            "../scripts/report_tune.py"


rule study_tune:
    """The tune study: searches on validation, choices, the chosen points and their baselines on test."""
    input:
        when_requested(PLAN.tune_static_targets),
        tune_targets,
