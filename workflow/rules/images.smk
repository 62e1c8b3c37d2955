# The image benchmarks (DomainNet, ImageNet-R, ImageNet-C, ImageNet-Mix, and any type declared with
# parallel_prepare, the default): one prepare job per benchmark
# checks the split against the data root, decodes every image once over the job's cores and stores
# uint8 arrays + manifest.json (resumable: a rerun continues from the chunks already written).


rule prepare_images:
    input:
        synthetic=synthetic_tree,
    output:
        manifest="results/data/{benchmark}/manifest.json",
        preview=report(DOMAINS_FIGURE, caption="../report/domains.rst", category="Benchmarks", subcategory="{benchmark}"),
    log:
        "results/logs/prepare_images/{benchmark}.log",
    benchmark:
        "results/timings/prepare_images/{benchmark}.tsv"
    wildcard_constraints:
        benchmark=one_of(PARALLEL_BENCHMARKS),
    params:
        benchmark=lambda w: prepare_settings(benchmark_config(config, w.benchmark)),
    threads: 16
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/prepare_images.py"
