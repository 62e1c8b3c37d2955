rule train_task:
    """Train task t from task t-1's state + hypercube, then evaluate it on every task's test set (column t
    of R: eval.json); one job per task - a job of its own for evaluation would cost more to start than it
    works. To re-evaluate a state: intact.evaluate.evaluate_task (the same numbers)."""
    input:
        unpack(previous_task),
        unpack(query_cache_input),
        manifest=manifest,
        backbone=backbone_weights,
        backbone_info=backbone_info,
    output:
        state=f"{RUN_DIR}/task{{task}}/state.safetensors",
        hypercube=f"{RUN_DIR}/task{{task}}/hypercube.safetensors",
        record=f"{RUN_DIR}/task{{task}}/train.json",
        evaluation=f"{RUN_DIR}/task{{task}}/eval.json",
    log:
        f"results/logs/train_task/{RUN_KEY}/task{{task}}.log",
    benchmark:
        f"results/timings/train_task/{RUN_KEY}/task{{task}}.tsv"
    params:
        run=run_config,
    threads: 1
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/train_task.py"


rule collect_run:
    """The accuracy matrix R and the metrics of one (benchmark, method, seed) run, from its task records once
    checked (sealed, this config's, each state and hypercube the one recorded: intact.results.collect_run)."""
    input:
        evals=run_tasks("eval.json"),
        trains=run_tasks("train.json"),
        manifest=manifest,
        code=script_code("collect_run.py"),
    output:
        R=f"{RUN_DIR}/R.csv",
        metrics=f"{RUN_DIR}/metrics.json",
    log:
        f"results/logs/collect_run/{RUN_KEY}.log",
    params:
        config_hash=run_hash,
    localrule: True
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/collect_run.py"
