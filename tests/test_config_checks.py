"""Early checks: everything that can be checked without training stops the config at validation, naming the key."""

import pytest

from conftest import assert_config_error, snakemake, tiny_config, write_config


@pytest.mark.parametrize("mutate, expected", [
    # prompt layers vs the backbone's depth (the embedded ViT has 4 blocks), for every layer key
    (lambda c: c["methods"]["coda_p"].update(layers=[0, 1, 2, 9]),
     ["methods.coda_p.layers", "[0, 1, 2, 9]", "depth 4"]),
    (lambda c: c["methods"]["dualprompt"].update(e_layers=[4]), ["methods.dualprompt.e_layers", "depth 4"]),
    (lambda c: c["methods"]["dualprompt"].update(g_layers=[5]), ["methods.dualprompt.g_layers", "[5]", "depth 4"]),
    # layer-like scalars and widths: a method's own checks see the backbone (depth 4, width 64)
    (lambda c: (c["run"].update(methods=["compositional_prompt"]),
                c["methods"]["compositional_prompt"].update(expert_last=20)),
     ["methods.compositional_prompt.expert_last", "= 20", "block 20 does not exist", "depth 4"]),
    (lambda c: (c["run"].update(methods=["ka_prompt+intact"]),
                c["methods"]["ka_prompt"].update(expert_first=4, expert_last=5)),
     ["methods.ka_prompt.expert_last", "depth 4"]),
    (lambda c: (c["run"].update(methods=["consistent_prompt"]),
                c["methods"]["consistent_prompt"].update(second_block=4)),
     ["methods.consistent_prompt.second_block", "= 4", "only 4 blocks"]),
    (lambda c: (c["run"].update(methods=["inflora"]), c["methods"]["inflora"].update(rank=65)),
     ["methods.inflora.rank", "= 65", "width 64"]),
    # method settings that do not fit the backbone or the benchmark
    (lambda c: c["methods"]["coda_p"].update(pool_size=2), ["methods.coda_p.pool_size", "3 tasks"]),
    (lambda c: c["methods"]["l2p"].update(top_k=20), ["methods.l2p.top_k", "pool_size = 10"]),
    (lambda c: c["benchmarks"]["digits"].update(image_size=64), ["benchmarks.digits.image_size", "32x32"]),
    (lambda c: c["backbones"]["vit_digits"].update(input_std=[0.5, 0.5, 0.5]),
     ["backbones.vit_digits.input_std", "1-channel"]),
    (lambda c: c["backbones"]["vit_digits"].update(model="vit_tiny_patch16_224"),
     ["benchmarks.digits.backbone", "3-channel"]),
    (lambda c: c["backbones"]["vit_digits"].update(model="resnet18"), ["backbones.vit_digits.model", "not a ViT"]),
    (lambda c: c["backbones"]["vit_digits"].update(pretrain={"benchmark": "mnist"}),
     ["backbones.vit_digits.pretrain.benchmark", "'mnist' is not defined under 'benchmarks'"]),
    (lambda c: c["backbones"]["vit_digits"].update(model="vit_nonexistent"),
     ["backbones.vit_digits.model", "Unknown model"]),
    # overrides the run would silently ignore
    (lambda c: c["run"].update(methods=["coda_p@lambda_var=0.1"]), ["no '+intact'", "coda_p+intact@lambda_var=0.1"]),
    (lambda c: c["run"].update(methods=["coda_p@methods.l2p.top_k=2"]), ["methods.l2p", "never reads"]),
    # lambda grids on a log axis, duplicated seeds and methods, undeclared methods in a study
    (lambda c: c["studies"]["sensitivity"]["grid"].update(lambda_var=[0, 1e-3]),
     ["studies.sensitivity.grid.lambda_var[0]", "> 0"]),
    (lambda c: c["studies"]["sensitivity"]["grid"].update(lambda_var=[-1e-3, 1e-3]),
     ["studies.sensitivity.grid.lambda_var[0]"]),
    (lambda c: c["run"].update(seeds=[0, 1, 0]), ["run.seeds", "listed twice"]),
    (lambda c: c["studies"]["sensitivity"].update(seeds=[1, 1]), ["studies.sensitivity.seeds", "listed twice"]),
    (lambda c: c["run"].update(methods=["coda_p", "coda_p"]), ["run.methods", "listed twice"]),
    (lambda c: c["studies"]["main"].update(methods=["coda_p", "coda_q"]), ["coda_q", "studies.main"]),
    (lambda c: c["methods"].update(l2p={"top_k": 0}), ["methods.l2p.top_k", "minimum"]),
])
def test_early_check_names_the_key(mutate, expected):
    assert_config_error(mutate, expected)


def test_default_checks_import_no_torch():
    """Validating the default config (Snakefile start-up, every cluster job) stays free of a torch import."""
    import subprocess
    import sys

    from conftest import REPO

    code = ("import sys; from intact.config import load_config; load_config(sys.argv[1]); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code, str(REPO / "config.yaml")], check=True)


@pytest.mark.parametrize("method, key, value", [("coda_p", "layers", [0, 1, 2, 9]),
                                                ("compositional_prompt", "expert_last", 20)])
def test_dry_run_with_prompt_layers_past_the_depth_stops_at_validation(tmp_path, method, key, value):
    cfg = tiny_config(methods=[method])
    cfg["methods"][method][key] = value
    write_config(tmp_path, cfg)
    proc = snakemake(tmp_path, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"methods.{method}.{key}" in out and "depth 4" in out, out[-2000:]
    assert "train_task" not in out and not (tmp_path / "results").exists()
