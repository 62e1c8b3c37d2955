# The paper's non-prompt experiments (config: `experiments:`), independent of the benchmark pipeline:
#   snakemake study_toy     Fig. 2: the 1-D Gaussian toy, with and without InTAct (seconds)
#   snakemake study_drift   appendix "Evolution of Internal Drift": MLP on Split-digits DIL, InTAct vs LwF vs fine-tuning


rule study_toy:
    """Three-panel figure of both fits after each task, and the drift inside earlier tasks' intervals."""
    input:
        code=script_code("study_toy.py"),
    output:
        figure=report("results/experiments/toy/toy.png", caption="../report/study_toy.rst", category="Non-prompt experiments"),
        csv=report("results/experiments/toy/toy_drift.csv", caption="../report/study_toy.rst", category="Non-prompt experiments"),
        md="results/experiments/toy/toy_drift.md",
        summary="results/experiments/toy/summary.json",
    log:
        "results/logs/study_toy.log",
    params:
        experiments=experiments_params(config, "toy"),
    threads: 1
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/study_toy.py"


rule study_drift:
    """Drift of each hidden layer on earlier tasks' samples after every task, per method; R tables."""
    input:
        code=script_code("study_drift.py"),
    output:
        figure=report("results/experiments/drift/drift.png", caption="../report/study_drift.rst", category="Non-prompt experiments"),
        csv=report("results/experiments/drift/drift.csv", caption="../report/study_drift.rst", category="Non-prompt experiments"),
        md="results/experiments/drift/drift.md",
        R="results/experiments/drift/R.md",
        summary="results/experiments/drift/summary.json",
    log:
        "results/logs/study_drift.log",
    params:
        experiments=experiments_params(config, "drift"),
    threads: 1
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/study_drift.py"
