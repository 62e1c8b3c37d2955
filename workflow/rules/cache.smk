rule query_cache:
    """q(x) of every prepared image and flip variant of a benchmark for its backbone, as .npy memory maps:
    shared by every method, seed and task (training, the hypercube pass and evaluation read it)."""
    input:
        manifest=manifest,
        backbone=backbone_weights,
    output:
        meta=QUERY_CACHE,
    log:
        "results/logs/query_cache/{benchmark}/{backbone}.log",
    benchmark:
        "results/timings/query_cache/{benchmark}/{backbone}.tsv"
    params:
        backbone=lambda w: recorded(backbone_config(config, w.backbone)),
        optim=query_cache_optim,
        # typed: Snakemake records plain values only, so this one adds nothing to the job's record (a changed
        # benchmark reaches the cache through its manifest, which the cache refuses to read against other settings)
        benchmark=lambda w: benchmark_config(config, w.benchmark),
    threads: 1
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/query_cache.py"
