# MLflow tracking: one local job per finished run, after its results are written. It never fails the
# workflow: an unreachable server leaves `status: pending` in the run's tracking.json, and
# `python -m intact.tracking sync results/` retries later (see src/intact/tracking/).
#   tracking_targets()                          markers of every run of `all` ([] if tracking.enabled is false)
#   tracking_markers(benchmark, methods, seeds) markers of any runs (e.g. a study's)
# (TRACKING and tracking_markers come from common.smk, which validates the section at start-up.)
from functools import partial

import intact.tracking as _tracking

tracking_targets = partial(_tracking.tracking_targets, config)


rule track_run:
    """Log one finished run (config, losses, R, metrics, hypercubes, figure) to MLflow."""
    input:
        R=f"{RUN_DIR}/R.csv",
        metrics=f"{RUN_DIR}/metrics.json",
        trains=lambda w: run_tasks(w, "train.json"),
        evals=lambda w: run_tasks(w, "eval.json"),
        hypercubes=lambda w: run_tasks(w, "hypercube.safetensors"),
    output:
        marker=f"{RUN_DIR}/tracking.json",
    log:
        "results/logs/track_run/{benchmark}/{method}/seed{seed}.log",
    params:
        tracking=TRACKING.to_dict(),
    localrule: True
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/track_run.py"
