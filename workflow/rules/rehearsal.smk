# A rehearsal's synthetic data and tiny backbones (configs/rehearsal.yaml, src/intact/rehearsal.py): made in the DAG,
# then read by the real rules - prepare_images decodes the tree through the real split checks and loaders,
# describe_backbone records the weights with their sha256 - as a real run's data and weights are. Without a
# `rehearsal:` section no job of these rules can exist (their wildcards match nothing).


rule rehearsal_data:
    """A synthetic image tree in the benchmark's real layout, with split lists in the real format."""
    output:
        tree=REHEARSAL_TREE,
    log:
        "results/logs/rehearsal_data/{benchmark}.log",
    wildcard_constraints:
        benchmark=one_of(REHEARSAL_BENCHMARKS),
    params:
        tree=lambda w: tree_params(config, w.benchmark),
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/rehearsal_data.py"


rule rehearsal_backbone:
    """The tiny stand-in of a paper backbone, initialised under the rehearsal's seed."""
    output:
        weights=REHEARSAL_WEIGHTS,
    log:
        "results/logs/rehearsal_backbone/{backbone}.log",
    wildcard_constraints:
        backbone=one_of(REHEARSAL_BACKBONES),
    params:
        model=lambda w: backbone_config(config, w.backbone).model,
        seed=lambda w: rehearsal_settings(config).seed,
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/rehearsal_backbone.py"
