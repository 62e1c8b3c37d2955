rule pretrain_backbone:
    """Pretrain a small backbone on a benchmark's clean split (backbones with `weights: pretrain`)."""
    input:
        manifest=lambda w: f"results/data/{backbone_config(config, w.backbone).pretrain.benchmark}/manifest.json",
    output:
        weights="results/backbones/{backbone}.safetensors",
        info="results/backbones/{backbone}.json",
    log:
        "results/logs/pretrain_backbone/{backbone}.log",
    benchmark:
        "results/timings/pretrain_backbone/{backbone}.tsv"
    wildcard_constraints:
        backbone=one_of(PRETRAINED_BACKBONES),
    params:
        backbone=lambda w: recorded(backbone_config(config, w.backbone)),
        # typed, so not in the job's record (as benchmark in cache.smk): the manifest input carries a change
        benchmark=lambda w: benchmark_config(config, backbone_config(config, w.backbone).pretrain.benchmark),
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/pretrain_backbone.py"


rule describe_backbone:
    """Check a user's local weights file (exists, sha256, fits the model) and record its provenance."""
    input:
        weights=lambda w: weights_input(w.backbone),
    output:
        info="results/backbones/{backbone}.json",
    log:
        "results/logs/describe_backbone/{backbone}.log",
    wildcard_constraints:
        backbone=one_of(EXTERNAL_BACKBONES),
    params:
        backbone=lambda w: recorded(backbone_config(config, w.backbone)),
        weights_sha256=lambda w: weights_sha256(w.backbone),
    conda:
        "../../envs/intact.yaml"
    script:
        "../scripts/describe_backbone.py"
