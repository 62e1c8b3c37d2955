"""Per-method training settings and protocols (issue 21 items 1-3): one declaration per method, layered
over the shared sections; the paper configs' ``intact`` and ``official`` protocols; the EMA head's span."""

from __future__ import annotations

import lzma
import math

import pytest
import torch

from conftest import REPO, tiny_config
from test_paper_workflow import layered
from intact.layering import load_file

PAPER = REPO / "configs" / "paper"
BENCHMARKS = ("domainnet", "imagenet_r", "imagenet_c", "imagenet_mix")


def _hashes(cfg: dict) -> dict[tuple[str, str, int], str]:
    from intact.config import resolve_run
    from intact.plan import Plan, each_run

    return {(b, m, s): resolve_run(cfg, b, m, s).hash() for b, m, s in each_run(Plan(cfg).declared_runs())}


# ---- item 1: per-method settings, declared once ------------------------------------------------------

def test_empty_layers_and_protocols_keep_every_recorded_hash():
    from intact.config import resolve_run

    cfg = load_file(REPO / "config.yaml")
    before = _hashes(cfg)
    cfg.update({"protocols": {"intact": {"description": "x", "per_method": {"compositional_prompt": {}}},
                              "official": {}}})
    cfg["benchmarks"]["digits"]["overrides"] = {"protocols": {"official": {"per_method": {}}}}
    assert _hashes(cfg) == before
    # the default run's hashes recorded before the declarations (tests/test_declarations.py)
    assert resolve_run(cfg, "digits", "coda_p", 0).hash() == "11c229a9373d"
    assert resolve_run(cfg, "digits", "coda_p+intact", 0).hash() == "a266ebc22f09"


def test_a_per_method_setting_changes_only_that_methods_runs():
    from intact.config import resolve_run

    cfg = tiny_config(methods=["coda_p", "compositional_prompt", "ka_prompt"])
    before = {m: resolve_run(cfg, "digits", m, 0) for m in cfg["run"]["methods"]}
    cfg["protocols"] = {"intact": {"per_method": {
        "compositional_prompt": {"optim": {"epochs": 3, "batch_size": 8, "optimizer": "sgd"}}}}}
    after = {m: resolve_run(cfg, "digits", m, 0) for m in cfg["run"]["methods"]}
    assert after["compositional_prompt"].hash() != before["compositional_prompt"].hash()
    assert (after["compositional_prompt"].optim.epochs, after["compositional_prompt"].optim.batch_size,
            after["compositional_prompt"].optim.optimizer) == (3, 8, "sgd")
    for m in ("coda_p", "ka_prompt"):      # KA-Prompt's settings extend C-Prompt's; its layer is its own
        assert after[m].hash() == before[m].hash() and after[m].optim == before[m].optim


def test_layers_merge_from_the_least_to_the_most_specific():
    from intact.config import resolve_run

    cfg = tiny_config()
    cfg["optim"]["epochs"] = 50
    cfg["benchmarks"]["digits"]["overrides"] = {"optim": {"epochs": 7},
                                                "protocols": {"intact": {"per_method": {
                                                                  "ka_prompt": {"optim": {"epochs": 9}}}},
                                                              "official": {"per_method": {
                                                                  "compositional_prompt": {"optim": {"epochs": 13}}}}}}
    cfg["protocols"] = {"intact": {"per_method": {"compositional_prompt": {"optim": {"epochs": 5}}}},
                        "official": {"per_method": {"compositional_prompt": {"optim": {"epochs": 11,
                                                                                     "batch_size": 4}}}}}

    def epochs(method: str) -> int:
        return resolve_run(cfg, "digits", method, 0).optim.epochs

    assert epochs("coda_p") == 7                   # the benchmark's shared optim over the config's
    assert epochs("compositional_prompt") == 5                 # the method's own over the benchmark's shared one
    assert epochs("ka_prompt") == 9                # the benchmark's per-method layer
    assert epochs("compositional_prompt@protocol=official") == 13           # the benchmark's refinement of the protocol
    assert resolve_run(cfg, "digits", "compositional_prompt@protocol=official", 0).optim.batch_size == 4
    assert epochs("compositional_prompt@optim.epochs=2,protocol=official") == 2   # the name's own override last
    assert epochs("coda_p@protocol=official") == 7  # the protocol sets nothing for coda_p


def test_a_protocol_that_sets_nothing_for_a_method_leaves_its_run_alone():
    from intact.studies import expand_studies

    cfg = tiny_config()
    cfg["protocols"] = {"official": {"per_method": {"compositional_prompt": {"methods": {
        "compositional_prompt": {"h": 5.0}}}}}}
    cfg["studies"]["main"] = {"methods": ["coda_p", "compositional_prompt"], "protocols": ["intact", "official"]}
    assert expand_studies(cfg)["main"].methods == ("coda_p", "compositional_prompt",
                                                   "compositional_prompt@protocol=official")
    cfg["benchmarks"]["digits"]["overrides"] = {"protocols": {"official": {"per_method": {
        "coda_p": {"optim": {"epochs": 2}}}}}}                      # a benchmark's refinement counts too
    assert "coda_p@protocol=official" in expand_studies(cfg)["main"].methods


def test_a_layer_names_the_backbone_of_its_runs():
    from intact.config import ConfigError, resolve_run, validate_config

    cfg = tiny_config()
    cfg["backbones"]["other"] = dict(cfg["backbones"]["vit_digits"])
    cfg["protocols"] = {"official": {"per_method": {"compositional_prompt": {"backbone": "other"}}}}
    assert resolve_run(cfg, "digits", "compositional_prompt@protocol=official", 0).backbone.name == "other"
    assert resolve_run(cfg, "digits", "compositional_prompt", 0).backbone.name == "vit_digits"
    cfg["protocols"]["official"]["per_method"]["compositional_prompt"]["backbone"] = "nowhere"
    with pytest.raises(ConfigError, match="names backbone 'nowhere'"):
        validate_config(cfg, check_files=False)


@pytest.mark.parametrize("name, message", [
    ("compositional_prompt@protocol=intact", "is the default protocol; leave it out of the name"),
    ("compositional_prompt@protocol=nope", "protocol 'nope' is not declared under 'protocols'"),
])
def test_protocol_names_are_checked(name, message):
    from intact.config import ConfigError, resolve_run

    cfg = tiny_config()
    cfg["protocols"] = {"official": {}}
    with pytest.raises(ConfigError, match=message):
        resolve_run(cfg, "digits", name, 0)


@pytest.mark.parametrize("mutate, key", [
    (lambda c: c.update(per_method={"coda_p": {"optim": {"epochs": 2}}}), "per_method"),
    (lambda c: c["benchmarks"]["digits"]["overrides"].update(per_method={"coda_p": {}}),
     "benchmarks.digits.overrides.per_method"),
    (lambda c: c.update(protocols={"official": {"optim": {"epochs": 2}}}), "protocols.official.optim"),
    (lambda c: c["benchmarks"]["digits"]["overrides"].update(protocols={"official": {"backbone": "vit_digits"}}),
     "benchmarks.digits.overrides.protocols.official.backbone"),
])
def test_only_the_four_layers_the_shipped_configs_use_are_declared(mutate, key):
    """Issue 44 item 3: a config's sections, a benchmark's overrides and, under a protocol, a method's own
    layer and a benchmark's refinement of it; the four other layers 0.1 declared (no shipped config used one) are
    refused, naming the key."""
    from intact.config import ConfigError, validate_config

    cfg = tiny_config()
    cfg["benchmarks"]["digits"]["overrides"] = dict(cfg["benchmarks"]["digits"].get("overrides") or {})
    mutate(cfg)
    msg = str(pytest.raises(ConfigError, validate_config, cfg, check_files=False).value)
    assert msg.startswith(f"config: unknown key {key!r} (expected one of: "), msg


@pytest.mark.parametrize("official, message", [
    ({"same_as_default": {"nope": "x"}}, "same_as_default.nope': unknown method 'nope'"),
    ({"same_as_default": {"compositional_prompt": "x"},
      "per_method": {"compositional_prompt": {"optim": {"epochs": 2}}}},
     "protocol 'official' sets settings of 'compositional_prompt' too"),
])
def test_a_method_declared_the_same_as_the_default_protocol_is_checked(official, message):
    """``same_as_default`` (issue 32) names a known method that the protocol sets nothing for."""
    from intact.config import ConfigError, validate_config

    cfg = tiny_config()
    cfg["protocols"] = {"official": {"same_as_default": {"coda_p": "a source"}}}
    validate_config(cfg, check_files=False)
    cfg["protocols"] = {"official": official}
    with pytest.raises(ConfigError, match=message):
        validate_config(cfg, check_files=False)


def test_the_official_schedules_are_torchs_per_epoch_schedulers():
    from intact.train import lr_factor

    spe, epochs = 3, 6
    torch_lr = torch.optim.lr_scheduler
    for schedule, make in (("multistep", lambda o: torch_lr.MultiStepLR(o, milestones=[2, 4], gamma=0.1)),
                           ("cosine_annealing", lambda o: torch_lr.CosineAnnealingLR(o, T_max=epochs))):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched, f = make(opt), lr_factor(schedule, epochs, spe, (2, 4), 0.1)
        for e in range(epochs):
            for step in range(e * spe, (e + 1) * spe):
                assert f(step) == pytest.approx(opt.param_groups[0]["lr"], abs=1e-12), (schedule, e)
            opt.step()
            sched.step()


def test_the_job_builds_the_declared_or_configured_optimizer(tiny_bench):
    from intact.config import resolve_run
    from intact.protocols import optimizer_name
    from intact.restore import build_method
    from intact.train import build_optimizer

    cfg = tiny_config()
    cfg["protocols"] = {"intact": {"per_method": {"coda_p": {"optim": {"optimizer": "sgd", "momentum": 0.5}}}}}
    for method, cls, extra in (("compositional_prompt", torch.optim.AdamW, {}),
                               ("coda_p", torch.optim.SGD, {"momentum": 0.5}), ("ka_prompt", torch.optim.AdamW, {})):
        run = resolve_run(cfg, "digits", method, 0)
        _, m, _ = build_method(run, tiny_bench["manifest"], tiny_bench["weights"], torch.device("cpu"))
        opt, _ = build_optimizer(m, run.optim, 4)
        assert type(opt) is cls and optimizer_name(run) == cls.__name__.lower()
        assert all(g[k] == v for g in opt.param_groups for k, v in extra.items())


# ---- item 2: the paper configs' two protocols ------------------------------------------------------------

#: the official scripts' budgets (docs/protocols.md, "The two protocols", cites each): (backbone, epochs,
#: batch, optimizer, schedule, lr); lr None: the method's own lr setting (C-/KA-Prompt's scripts)
OFFICIAL = {
    "compositional_prompt": ("vit_b16_in21k", 5, 128, "adamw", "constant", None),
    "ka_prompt": ("vit_b16_in21k", 5, 128, "adamw", "constant", None),
    "inflora": ("vit_b16_in21k", 50, 128, "adam", "cosine_epoch", 5e-4),
    "s_prompts": ("vit_b16_augreg_in1k_imagenet_norm", 30, 128, "sgd", "cosine_annealing", 0.01),
    "esn": ("vit_b16_augreg_in1k_imagenet_norm", 10, 128, "sgd", "cosine_annealing", 0.01),
    "consistent_prompt": ("vit_b16_augreg_in1k", 10, 16, "sgd", "cosine_annealing", 0.01),
}
#: the scripts' weight decay (every task: ESN trainer.py:17,21, CPrompt exps/*.json; S-Prompts' after the first)
WEIGHT_DECAY = {"inflora": 0.0, "s_prompts": 2e-4, "esn": 5e-4, "consistent_prompt": 5e-4}
#: the scripts' RandomResizedCrop(224) + flip, Resize(256) + CenterCrop(224); S-Prompts' first-task weight decay
#: (C-/KA-Prompt: Resize(224) + RandomCrop(224) + flip, read as the benchmark's view; docs/protocols.md section 8)
VIEWS = {"inflora": ("random_resized", 256, None), "s_prompts": ("random_resized", 256, 5e-4),
         "esn": ("random_resized", 256, None), "consistent_prompt": ("random_resized", 256, None)}
DOMAINNET = {"ka_prompt": {"epochs": 10}, "consistent_prompt": {"epochs": 15},   # lr: the LoRA's / the head's
             "inflora": {"epochs": 5, "optimizer": "sgd", "schedule": "multistep", "lr": "0.005/0.01"}}


@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_official_protocol_resolves_each_rows_authors_budget(name):
    from intact.config import resolve_run, validate_config
    from intact.protocols import training_summary
    from intact.studies import expand_studies

    cfg = layered(name)
    validate_config(cfg, check_files=False)
    main = expand_studies(cfg)["main"].methods
    for method, (backbone, epochs, batch, optimizer, schedule, lr) in OFFICIAL.items():
        assert f"{method}@protocol=official" in main and method in main
        want = {"backbone": backbone, "epochs": epochs, "batch": batch, "optimizer": optimizer, "schedule": schedule,
                **({"lr": lr} if lr else {}), **(DOMAINNET.get(method, {}) if name == "domainnet" else {})}
        got = training_summary(resolve_run(cfg, name, f"{method}@protocol=official", 0))
        shown = {"schedule": "multistep[4]"} if want["schedule"] == "multistep" else {}
        assert {k: got[k] for k in want} == want | shown
        assert resolve_run(cfg, name, f"{method}@protocol=official", 0).optim.drop_last is False
        if method in WEIGHT_DECAY:
            assert got["weight_decay"] == WEIGHT_DECAY[method]
        o = resolve_run(cfg, name, f"{method}@protocol=official", 0).optim
        assert (o.train_crop, o.test_resize, o.first_task_weight_decay) == VIEWS.get(method, ("benchmark", None, None))
    # the rows the official protocol sets nothing for are one run under both protocols
    for method in ("ewc", "lwf", "l2p", "dualprompt", "coda_p", "coda_p+intact"):
        assert method in main and f"{method}@protocol=official" not in main
    intact = training_summary(resolve_run(cfg, name, "compositional_prompt", 0))
    assert (intact["protocol"], intact["batch"], intact["optimizer"]) == ("intact", 64, "adamw")


def test_intact_runs_shows_what_each_run_trains_with(tmp_path, monkeypatch, capsys):
    from intact.cli import main

    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"x")
    for var in ("INTACT_VIT_B16_AUGREG2", "INTACT_VIT_B16", "INTACT_VIT_B16_AUGREG_IN1K"):
        monkeypatch.setenv(var, str(weights))
    monkeypatch.setenv("IMAGENET_R_ROOT", str(tmp_path))
    assert main(["runs", str(PAPER / "imagenet_r.yaml")]) == 0
    lines = {tuple(ln.split("\t")[:2]): ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")}
    official = lines[("imagenet_r", "compositional_prompt@protocol=official")]   # C-Prompt
    for part in ("protocol=official", "backbone=vit_b16_in21k", "epochs=5", "batch=128", "optimizer=adamw",
                 "schedule=constant", "lr=0.005"):
        assert f"\t{part}" in official, official
    for part in ("protocol=intact", "epochs=50", "batch=64", "optimizer=adamw", "schedule=cosine_epoch"):
        assert f"\t{part}" in lines[("imagenet_r", "compositional_prompt")]
    assert "\toptimizer=sgd" in lines[("imagenet_r", "s_prompts@protocol=official")]
    for run, batch, epochs in (("esn", 128, 10), ("consistent_prompt", 16, 10)):   # ESN, CPrompt: their scripts
        sgd = ("protocol=official", "optimizer=sgd", "lr=0.01", "weight_decay=0.0005")
        for part in (*sgd, f"batch={batch}", f"epochs={epochs}"):
            assert f"\t{part}" in lines[("imagenet_r", f"{run}@protocol=official")]


@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_paper_plan_lists_both_protocols(name):
    from intact.plan import Plan

    files = set(Plan(layered(name)).full_targets())
    for run in ("compositional_prompt", "compositional_prompt@protocol=official", "inflora@protocol=official",
                "s_prompts@protocol=official"):
        assert f"results/runs/{name}/{run}/seed0/metrics.json" in files


# ---- item 3: the EMA head's span ----------------------------------------------------------------------

def _train_sizes(name: str) -> list[int]:
    """Every task's training images under the paper config's split (the shipped lists; DomainNet's counts:
    src/intact/data/splits/README.md)."""
    from intact.data.image_config import IMAGENET_C, IMAGENET_R

    def count(f: str, key) -> dict[str, int]:
        out: dict[str, int] = {}
        for line in lzma.open(REPO / "src/intact/data/splits" / f, "rt"):
            if line.strip():
                out[key(line.split()[0])] = out.get(key(line.split()[0]), 0) + 1
        return out

    r_domain = lambda p: p.split("/")[-1].split("_")[0]      # noqa: E731  <wnid>/<domain>_<n>.jpg
    c_domain = lambda p: [x for x in p.split("/") if x in IMAGENET_C][0]   # noqa: E731
    if name == "domainnet":
        return [120906, 120750, 50416, 48212, 36023, 33525]
    if name == "imagenet_r":
        sizes = count("imagenet-r_coda_train.txt.xz", r_domain)
        return [sizes[d] for d in IMAGENET_R]
    c = count("imagenet-c_train.txt.xz", c_domain)
    if name == "imagenet_c":
        return [c[d] for d in IMAGENET_C]
    r = count("imagenet-r_ka_train.txt.xz", r_domain)
    return [n for pair in zip((c[d] for d in IMAGENET_C), (r[d] for d in IMAGENET_R)) for n in pair]


@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_intact_budgets_ema_spans_the_tasks_the_authors_h_spans(name):
    """ema_span = e^(h-1) / the official run's mean steps per task; converted back under the intact budget."""
    from intact.config import resolve_run
    from intact.methods.compositional_prompt import ema_h, ema_span

    cfg, sizes = layered(name), _train_sizes(name)
    for method in ("compositional_prompt", "ka_prompt"):
        off, ours = resolve_run(cfg, name, f"{method}@protocol=official", 0), resolve_run(cfg, name, method, 0)
        assert off.settings.ema_span is None        # the official protocol runs the script's h itself
        steps = [off.optim.epochs * math.ceil(n / off.optim.batch_size) for n in sizes]
        want = ema_span(off.settings.h, steps)
        assert ours.settings.ema_span == pytest.approx(want, rel=1e-3), (method, want)
        mine = [ours.optim.epochs * (n // ours.optim.batch_size) for n in sizes]
        assert ema_h(ours.settings.ema_span, mine) > off.settings.h   # more steps per task: a larger h
        assert ema_h(want, steps) == pytest.approx(off.settings.h)


def test_the_evaluated_head_lags_the_live_head_under_both_protocols(tiny_bench, tmp_path):
    """At the end of task 1 the EMA (evaluated) head is still far from the live head - a good part of the
    live head's move over the task - under a long budget with ema_span and under a short one with the
    authors' fixed h; the same fixed h under the long budget collapses onto the live head."""
    from intact.config import resolve_run
    from intact.data import open_benchmark
    from intact.io import load_tensors, read_json
    from intact.methods.compositional_prompt import ema_h, task_steps
    from intact.train import train_task

    cfg = tiny_config()
    cfg["optim"].update({"epochs": 2, "batch_size": 16})
    cfg["protocols"] = {"official": {"per_method": {"compositional_prompt": {
        "optim": {"epochs": 1, "batch_size": 64}, "methods": {"compositional_prompt": {"ema_span": None}}}}}}
    bench = open_benchmark(tiny_bench["manifest"])
    official_steps = task_steps(resolve_run(cfg, "digits", "compositional_prompt@protocol=official", 0), bench, 3)
    # h: the "authors'" one task
    cfg["methods"]["compositional_prompt"].update({"ema_span": 1.0, "h": ema_h(1.0, official_steps)})
    lag = {}
    no_span = "compositional_prompt@methods.compositional_prompt.ema_span=null"
    for name in ("compositional_prompt", "compositional_prompt@protocol=official", no_span):
        run = resolve_run(cfg, "digits", name, 0)
        for t in range(2):
            train_task(run, t, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                       out_dir=tmp_path / name / f"task{t}", prev_dir=tmp_path / name / "task0" if t else None,
                       threads=1, progress=False)
        s0, s1 = (load_tensors(tmp_path / name / f"task{t}/state.safetensors") for t in range(2))
        live, ema = s1["head.fc0.weight"], s1["ema.shadow_fc0__weight"]
        lag[name] = float((ema - live).norm() / (live - s0["head.fc0.weight"]).norm())
        if name == "compositional_prompt":   # h from the span and this run's own steps per task
            steps = task_steps(run, bench, 3)
            assert read_json(tmp_path / name / "task1/train.json")["ema_h"] == pytest.approx(ema_h(1.0, steps))
    assert lag["compositional_prompt"] > 0.25 and lag["compositional_prompt@protocol=official"] > 0.25, lag
    assert lag[no_span] < 0.2 * lag["compositional_prompt"], lag
