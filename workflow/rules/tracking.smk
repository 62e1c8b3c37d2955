# MLflow tracking: one local job per finished run, after its results are written. It never fails the
# workflow: an unreachable server leaves `status: pending` in the run's tracking.json, and
# `python -m intact.tracking sync results/` retries later (see src/intact/tracking/, docs/tracking.md).
# Which markers a target asks for (every run of `all` and of each study, none if tracking.enabled is
# false) is intact.plan's: PLAN.markers in common.smk, which also validates the section at start-up.
from intact.tracking import MARKER


rule track_run:
    """Log one finished run (config, losses, R, metrics, hypercubes, figure) to MLflow."""
    input:
        R=f"{RUN_DIR}/R.csv",
        metrics=f"{RUN_DIR}/metrics.json",
        trains=run_tasks("train.json"),
        evals=run_tasks("eval.json"),
        hypercubes=run_tasks("hypercube.safetensors"),
        # a tune search's final run: the choice its tags and artifact come from (a new choice logs it again)
        choice=lambda w: PLAN.tune_finals.get((w.benchmark, w.method), []),
    output:
        marker=f"{RUN_DIR}/{MARKER}",
    log:
        f"results/logs/track_run/{RUN_KEY}.log",
    params:
        # where a run goes is recorded: another server or experiment logs it again; how it is reached (timeouts,
        # retries, deadline) goes typed, which Snakemake does not record: changing it re-logs no run
        destination={"uri": TRACKING.uri, "experiment": TRACKING.experiment},
        tracking=TRACKING,
        config_hash=run_hash,
    localrule: True
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/track_run.py"
