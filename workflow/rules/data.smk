# Benchmarks prepared in one process (declared with parallel_prepare=False: digits): manifest.json, the data files
# it lists, and the picture of the tasks.
# A job's own process reads no benchmark type to split the benchmarks between prepare_images and prepare_data
# (intact.config.prepared_by: a plugin the job does not use stays unimported), so there both rules match every
# benchmark: the order below settles which one Snakemake names as a file's producer; the job runs its own rule.
ruleorder: prepare_images > prepare_data

rule prepare_data:
    output:
        manifest="results/data/{benchmark}/manifest.json",
        preview=report(DOMAINS_FIGURE, caption="../report/domains.rst", category="Benchmarks", subcategory="{benchmark}"),
    log:
        "results/logs/prepare_data/{benchmark}.log",
    benchmark:
        "results/timings/prepare_data/{benchmark}.tsv"
    wildcard_constraints:
        benchmark=one_of(SERIAL_BENCHMARKS),
    params:
        benchmark=lambda w: recorded(benchmark_config(config, w.benchmark)),
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/prepare_data.py"
