"""The network family: a whole MLP / CNN with BatchNorm trained end to end through the ordinary task jobs."""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_config
from intact.config import benchmark_config, resolve_run
from intact.data import benchmark_class
from intact.evaluate import evaluate_task
from intact.io import load_tensors, read_json
from intact.regularizers.hypercube import load_hypercubes
from intact.train import train_task

CNN = "net_finetune+intact@methods.net_finetune.model=cnn_bn,methods.net_finetune.feature=conv1"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    cfg = tiny_config()
    cfg["optim"]["epochs"] = 2
    root = tmp_path_factory.mktemp("net_digits")
    manifest = benchmark_class("digits").prepare(benchmark_config(cfg, "digits"), root / "data")
    return cfg, manifest


def _run(cfg, manifest, method, out, tasks=2):
    run = resolve_run(cfg, "digits", method, 0)
    torch.set_num_threads(1)
    for t in range(tasks):
        # no backbone is built for the network family: the weights path is never opened
        train_task(run, t, manifest=manifest, backbone_weights=out / "unused.safetensors", out_dir=out / f"task{t}",
                   prev_dir=out / f"task{t - 1}" if t else None, threads=1, progress=False)
        evaluate_task(run, t, manifest=manifest, backbone_weights=out / "unused.safetensors",
                      state=out / f"task{t}/state.safetensors", out_path=out / f"task{t}/eval.json", threads=1)
    return run


@pytest.mark.slow
@pytest.mark.parametrize("method", ["net_finetune+intact", CNN, "net_ewc", "net_lwf"])
def test_network_methods_train_end_to_end(digits, tmp_path, method):
    cfg, manifest = digits
    if method == CNN:  # (a list cannot be spelled in a run name)
        cfg = {**cfg, "methods": {**cfg["methods"],
                                  "net_finetune": {**cfg["methods"]["net_finetune"], "widths": [8, 16]}}}
    _run(cfg, manifest, method, tmp_path)
    state = load_tensors(tmp_path / "task1/state.safetensors")
    assert all(k.startswith(("model.", "fisher.", "anchor_params.")) for k in state)      # what trains, nothing else
    rec = read_json(tmp_path / "task1/train.json")
    assert rec["backbone_sha256"] is None and rec["trainable_parameters"] > 0
    acc = read_json(tmp_path / "task1/eval.json")["accuracy"]
    assert acc[1] > 30, f"{method}: accuracy on the task just trained {acc} (chance: 10%)"
    if "+intact" in method:
        assert rec["epochs"][-1]["intdrift"] > 0 and rec["epochs"][-1]["feat"] >= 0
        assert rec["certificate"] >= rec["sampled_drift"] > 0                           # the certificate is sound
    if method == "net_ewc":
        assert any(k.startswith("fisher.model.") or k.startswith("fisher.model__") for k in state)
    if method == CNN:
        cubes = load_hypercubes(tmp_path / "task1/hypercube.safetensors")
        assert cubes["conv1"].lower.shape == (8, 16, 16) and cubes["bn0"].lower.shape == (8, 16, 16)
        assert any(k.endswith("bn0.running_mean") for k in state)                          # BatchNorm statistics saved


def test_protected_layers_are_chosen_by_config():
    from intact.methods import create_method

    cfg = tiny_config()
    cfg["methods"]["net_finetune"]["protect"] = ["fc1", "fc2"]
    method = create_method(resolve_run(cfg, "digits", "net_finetune+intact", 0), None, 10, 3)
    assert list(method.intact.tracker.layers) == ["fc1", "fc2"] and method.intact.tracker.feature == "fc1"
    cfg["methods"]["net_finetune"]["protect"] = ["conv9"]
    with pytest.raises(ValueError, match=r"protect = \['conv9'\]: names \['conv9'\], not layers of the mlp"):
        create_method(resolve_run(cfg, "digits", "net_finetune+intact", 0), None, 10, 3)


@pytest.mark.parametrize("model, widths", [("mlp", (128, 64)), ("mlp", (7,)), ("cnn_bn", (8, 16)), ("cnn_bn", (4,))])
def test_the_declared_layer_names_are_the_built_networks(model, widths):
    """What validation checks ``feature`` and ``protect`` against (no torch) is what the job builds."""
    from intact.methods.net_finetune import layer_names
    from intact.models.networks import build_network
    from intact.regularizers.interval import AFFINE

    net = build_network(model, (3, 16, 16), widths, 10)
    assert layer_names(model, widths) == [n for n, m in net.named_modules() if isinstance(m, AFFINE)]


@pytest.mark.parametrize("settings, fragments", [
    # each accepted by validation before 2026-11-30 and refused by the job (or, channels, a shape error in it)
    ({"model": "cnn_bn"}, ["methods.net_finetune.feature", "'fc1'", "not a protected layer of the cnn_bn",
                           "['conv0', 'bn0', 'conv1', 'bn1', 'fc0']"]),
    ({"channels": 3}, ["methods.net_finetune.channels", "benchmark 'digits' (type 'digits') has 1-channel images"]),
    ({"protect": ["fc0", "fc9"]}, ["methods.net_finetune.protect", "names ['fc9']"]),
    ({"protect": ["fc0"]}, ["methods.net_finetune.feature", "not a protected layer", "expected one of ['fc0']"]),
])
def test_a_network_that_does_not_fit_its_benchmark_or_names_no_such_layer_is_refused_at_validation(settings,
                                                                                                    fragments):
    from intact.config import ConfigError, validate_config

    cfg = tiny_config()
    cfg["run"]["methods"] = ["net_finetune+intact"]
    cfg["methods"]["net_finetune"].update(settings)
    msg = str(pytest.raises(ConfigError, validate_config, cfg, check_files=False).value)
    assert all(f in msg for f in fragments), msg


def test_plus_intact_only_where_accepted_and_typos_are_caught():
    from intact.config import ConfigError, validate_config

    cfg = tiny_config()
    cfg["methods"]["net_lwf"]["widht"] = [3]
    with pytest.raises(ConfigError, match="widht"):
        validate_config(cfg, check_files=False)

    with pytest.raises(ConfigError, match="does not accept"):
        resolve_run(tiny_config(), "digits", "net_lwf+intact", 0)
