# Benchmarks prepared in one process (declared with parallel_prepare=False: digits): manifest.json, the data files
# it lists, and the picture of the tasks.
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
