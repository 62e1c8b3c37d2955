"""Issue 17, items 5-9: the audit's findings, each a test that failed before its fix.

5. a batch skipped by ``optim.on_nonfinite: skip_batch`` leaves BatchNorm's running statistics as they were,
   and the guard refuses to save any non-finite tensor of the task (buffers, hypercubes, Fisher);
6. the certificate is computed in eval mode whatever the caller's mode;
7. L_Feat through BatchNorm: unchanged weights give L_Feat = 0 while the student trains;
8. a stored query cache built under other settings (mean, std, model, size, precision) is refused by name;
9. a split whose task shares paths between its train and test lists is refused; ImageNet-C's documented
   reuse of an image across corruptions is a warning in the manifest.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections import OrderedDict

import pytest
import torch
from torch import nn

import image_trees as trees
from conftest import tiny_config
from intact.config import IntactConfig, benchmark_config, resolve_run
from intact.data import benchmark_class
from intact.guard import NonFiniteError
from intact.io import load_tensors, read_json
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.regularizer import IntactRegularizer
from intact.restore import load_method
from intact.train import train_task

CNN = "net_finetune+intact@methods.net_finetune.model=cnn_bn,methods.net_finetune.feature=conv1"
SKIP = ",optim.on_nonfinite=skip_batch,optim.max_skipped_fraction=0.2"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    cfg = tiny_config()
    cfg["optim"]["epochs"] = 2
    cfg["methods"]["net_finetune"]["widths"] = [8, 16]
    root = tmp_path_factory.mktemp("audit_digits")
    manifest = benchmark_class("digits").prepare(benchmark_config(cfg, "digits"), root / "data")
    return cfg, manifest


def _train(cfg, manifest, method, out, task=0, **kw):
    run = resolve_run(cfg, "digits", method, 0)
    return train_task(run, task, manifest=manifest, backbone_weights=out / "unused.safetensors", out_dir=out / f"task{task}",
                      prev_dir=out / f"task{task - 1}" if task else None, threads=1, progress=False, **kw)


# ---- 5: the divergence guard and BatchNorm ---------------------------------------------------------------

def test_a_skipped_batch_leaves_batchnorm_statistics_as_they_were(digits, tmp_path, monkeypatch):
    """One NaN pixel at step 3 of a conv-BN network: the batch is skipped, and neither the saved running
    statistics nor the evaluation logits are non-finite."""
    from intact.methods.shared.network import NetworkMethod as NetworkFinetune

    cfg, manifest = digits
    original = NetworkFinetune.loss
    calls = {"n": 0}

    def loss(self, x, y):
        if calls["n"] == 2:
            x = x.clone()
            x[0, 0, 0, 0] = float("nan")
        calls["n"] += 1
        return original(self, x, y)

    monkeypatch.setattr(NetworkFinetune, "loss", loss)
    rec = _train(cfg, manifest, CNN + SKIP, tmp_path, eval_out=tmp_path / "eval.json")
    assert rec["nonfinite"]["skipped_batches"] == 1 and rec["nonfinite"]["skipped_at"] == [[0, 2]]
    state = load_tensors(tmp_path / "task0/state.safetensors")
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    assert not bad, f"non-finite saved tensors: {bad}"
    assert all(math.isfinite(a) for a in read_json(tmp_path / "eval.json")["accuracy"])
    # the evaluation logits of the saved state are finite (an accuracy is finite even for NaN logits)
    run = resolve_run(cfg, "digits", CNN + SKIP, 0)
    bench, method, _ = load_method(run, manifest, tmp_path / "unused.safetensors", torch.device("cpu"),
                                   state=tmp_path / "task0/state.safetensors", state_task=0)
    x, _ = bench.eval_set(0)[0]
    with torch.no_grad():
        assert torch.isfinite(method.eval().predict(x[None])).all()


def test_the_guard_refuses_to_save_a_non_finite_tensor_of_the_task(digits, tmp_path, monkeypatch):
    """A non-finite hypercube (or buffer) is never written: the job fails naming it, no state is saved."""
    from intact.methods.shared.base import ContinualMethod as ProtectedMethod

    cfg, manifest = digits
    original = ProtectedMethod.end_task

    def end_task(self, task, train_set):
        info = original(self, task, train_set)
        cube = self.hypercubes["fc0"]
        cube.upper[0] = float("inf")
        return info

    monkeypatch.setattr(ProtectedMethod, "end_task", end_task)
    with pytest.raises(NonFiniteError, match=r"hypercube 'fc0'"):
        _train(cfg, manifest, CNN, tmp_path)
    assert not (tmp_path / "task0/state.safetensors").exists() and not (tmp_path / "task0/train.json").exists()


def test_the_guard_names_a_non_finite_buffer():
    from intact.guard import check_saved

    good = {"model.bn0.running_mean": torch.zeros(2), "model.bn0.num_batches_tracked": torch.tensor(3)}
    check_saved("run r", 0, good, {"fc0": Hypercube(torch.zeros(2), torch.ones(2))})
    with pytest.raises(NonFiniteError, match=r"buffer or parameter 'fisher.model.fc0.weight'"):
        check_saved("run r", 0, {**good, "fisher.model.fc0.weight": torch.tensor([1.0, float("nan")])}, {})


# ---- 6: the certificate in eval mode ---------------------------------------------------------------------

def _after_task0(digits, tmp_path):
    cfg, manifest = digits
    if not (tmp_path / "task0/state.safetensors").exists():
        _train(cfg, manifest, CNN, tmp_path)
    run = resolve_run(cfg, "digits", CNN, 0)
    bench, method, _ = load_method(run, manifest, tmp_path / "unused.safetensors", torch.device("cpu"),
                                   state=tmp_path / "task0/state.safetensors",
                                   hypercubes=tmp_path / "task0/hypercube.safetensors", state_task=0)
    train_set = method.training_data(bench, 1)
    method.begin_task(1, train_set)
    torch.manual_seed(0)
    with torch.no_grad():  # a large update, so that the drift is far from zero
        for p in method.model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return method, train_set


def test_the_certificate_is_computed_in_eval_mode_whatever_the_callers_mode(digits, tmp_path):
    method, train_set = _after_task0(digits, tmp_path)
    twin, _ = _after_task0(digits, tmp_path)                              # the same state, loaded again
    stats = {k: v.clone() for k, v in method.model.state_dict().items() if "running" in k}
    method.train()
    info = method.end_task(1, train_set)
    assert method.training                                               # the caller's mode is restored
    after = method.model.state_dict()
    assert all(torch.equal(stats[k], after[k]) for k in stats)            # the samples left the statistics alone
    twin.eval()
    ref = twin.end_task(1, train_set)
    assert info["sampled_drift"] == ref["sampled_drift"] and info["certificate"] == ref["certificate"]
    assert info["sampled_drift"] <= info["certificate"]


# ---- 7: L_Feat through BatchNorm -------------------------------------------------------------------------

def test_feat_is_zero_for_unchanged_weights_after_a_batchnorm():
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict(fc0=nn.Linear(4, 6), bn0=nn.BatchNorm1d(6), act0=nn.ReLU(), fc1=nn.Linear(6, 3)))
    cfg = IntactConfig(lambda_intdrift=0.0, lambda_feat=1.0, lambda_var=0.0, lambda_align=0.0)
    reg = IntactRegularizer(cfg, model, ["fc0", "fc1"], feature="fc1")
    big = {n: Hypercube(torch.full((d,), -1e6), torch.full((d,), 1e6)) for n, d in (("fc0", 4), ("fc1", 6))}
    reg.hypercubes = big
    reg.begin_task(1)
    teacher_stats = {k: v.clone() for k, v in reg.teacher.state_dict().items()}
    x = 3.0 + 2.0 * torch.randn(16, 4)                                   # far from the running statistics (0, 1)
    # in eval mode both sides use the (equal) running statistics
    model.eval()
    model(x)
    assert float(reg.penalty(teacher=lambda t: reg.teacher_feature(x))["feat"]) == pytest.approx(0.0, abs=1e-10)
    # training: the student normalises with the batch's statistics, and so must the teacher
    model.train()
    model(x)
    terms = reg.penalty(teacher=lambda t: reg.teacher_feature(x))
    assert float(terms["feat"]) == pytest.approx(0.0, abs=1e-10)
    assert all(torch.equal(v, reg.teacher.state_dict()[k]) for k, v in teacher_stats.items())  # teacher untouched


# ---- 8: the query cache's own staleness check ------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("input_mean", (0.25,)), ("input_std", (0.4,))])
def test_a_query_cache_built_under_other_settings_is_refused_by_name(tiny_bench, tmp_path, field, value):
    from intact.cache import build_query_cache
    from intact.evaluate import evaluate_task

    cfg, manifest, w = tiny_bench["config"], tiny_bench["manifest"], tiny_bench["weights"]
    cfg = copy.deepcopy(cfg)
    cfg["optim"]["feature_cache"] = True
    run = resolve_run(cfg, "digits", "coda_p", 0)
    other = dataclasses.replace(run.backbone, **{field: value})
    qdir = tmp_path / "query"
    meta = build_query_cache(other, manifest, w, qdir, threads=1, progress=False)
    with pytest.raises(ValueError, match=rf"query cache .*{field}"):
        train_task(run, 0, manifest=manifest, backbone_weights=w, out_dir=tmp_path / "task0", threads=1,
                   progress=False, query_cache=qdir)
    assert meta["settings"][field] == list(value)
    with pytest.raises(ValueError, match=rf"query cache .*{field}"):
        evaluate_task(run, 0, manifest=manifest, backbone_weights=w, state=None, out_path=tmp_path / "eval.json",
                      threads=1, query_cache=qdir)


# ---- 9: train/test overlap in a split --------------------------------------------------------------------

def test_a_split_with_train_test_overlap_is_refused_naming_the_file_and_paths(tmp_path):
    from test_image_benchmarks import R2, bench_cfg

    root, lists = tmp_path / "imagenet-r", tmp_path / "lists"
    trees.imagenet_r(root, lists, R2)
    train = (lists / "train.txt").read_text().splitlines()
    (lists / "test.txt").write_text((lists / "test.txt").read_text() + "\n".join(train[:2]) + "\n")
    cfg = bench_cfg("r", type="imagenet_r", root=str(root), split=str(lists), domains=R2)
    from intact.data.split_lists import SplitError

    with pytest.raises(SplitError) as err:
        benchmark_class("imagenet_r").prepare(cfg, tmp_path / "out", workers=1, progress=False)
    msg = str(err.value)
    assert "test.txt" in msg and "train.txt" in msg and "2 " in msg and train[0].rsplit(" ", 1)[0] in msg, msg
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_imagenet_c_reuse_across_corruptions_is_a_manifest_warning(tmp_path):
    from test_image_benchmarks import C2, bench_cfg

    root, lists = tmp_path / "imagenet-c", tmp_path / "lists"
    trees.imagenet_c(root, lists, C2)
    # the reference lists' design: a test image of one corruption is a training image of another
    test = (lists / "test.txt").read_text().splitlines()
    image = next(ln for ln in test if ln.startswith(C2[0] + "/"))
    reused = image.replace(C2[0], C2[1], 1)                              # the same image, the other corruption
    (lists / "test.txt").write_text("\n".join(ln for ln in test if ln != reused) + "\n")
    (lists / "train.txt").write_text((lists / "train.txt").read_text() + reused + "\n")
    cfg = bench_cfg("c", type="imagenet_c", root=str(root), split=str(lists), domains=C2)
    manifest = read_json(benchmark_class("imagenet_c").prepare(cfg, tmp_path / "out", workers=1, progress=False))
    warnings = manifest["warnings"]
    assert len(warnings) == 1 and "1 test image" in warnings[0] and C2[0] in warnings[0], warnings


# ---- item 2: ImageNet-Mix's C tasks get the authors' transform by default --------------------------------

@pytest.mark.parametrize("c_transform, side", [(None, 32), ("authors", 32), ("imagenet_c", round(32 * 230 / 224))])
def test_imagenet_mix_c_tasks_use_the_authors_transform_unless_switched(tmp_path, c_transform, side):
    from intact.cache import variants
    from intact.data import open_benchmark
    from test_image_benchmarks import bench_cfg, configs

    base = tmp_path / "trees"
    trees.imagenet_r(base / "imagenet-r", base / "r_lists", ["art"])
    trees.imagenet_c(base / "imagenet-c", base / "c_lists", ["defocus_blur"])
    (base / "mix_lists").mkdir()
    for half in ("r", "c"):
        for part in ("train", "test"):
            (base / "mix_lists" / f"{half}_{part}.txt").write_text((base / f"{half}_lists" / f"{part}.txt").read_text())
    spec = {k: v for k, v in configs(base)["imagenet_mix"].items() if k != "c_transform"}
    spec.update({"c_transform": c_transform} if c_transform else {})
    cfg = bench_cfg("mix", **spec)
    assert cfg.c_transform == (c_transform or "authors")
    manifest = benchmark_class("imagenet_mix").prepare(cfg, tmp_path / "out", workers=1, progress=False)
    task = read_json(manifest)["tasks"][0]
    assert task["name"] == "c_defocus_blur" and (task["resize"], task["train_crop"], task["test_crop"]) == (side, side, 32)
    # the authors' transform has a finite set of variants (flip): the query cache covers the C tasks too
    assert variants(open_benchmark(manifest).train_set(0)) == (None if c_transform == "imagenet_c" else 2)


def test_the_mix_transform_is_part_of_the_hash_and_other_benchmarks_keep_theirs():
    from test_image_benchmarks import bench_cfg
    from intact.data.image_config import plain_config

    r = bench_cfg("r", type="imagenet_r", root="/x")
    assert "c_transform" not in plain_config(r)                    # unset: existing runs' params and hashes stand
    m = bench_cfg("m", type="imagenet_mix", root_r="/x", root_c="/y")
    assert plain_config(m)["c_transform"] == "authors"


# ---- item 1: a weights file is checked against the backbone it is named for --------------------------------

def test_a_weights_file_written_for_another_timm_model_is_refused(tmp_path):
    from safetensors.torch import save_file

    from intact.models.backbone import WeightsError, create_vit, load_backbone_weights

    path = tmp_path / "w.safetensors"
    save_file(create_vit("vit_digits_p8").state_dict(), str(path), metadata={"timm_model": "vit_base_patch16_224.augreg_in21k"})
    with pytest.raises(WeightsError, match=r"written for timm model 'vit_base_patch16_224.augreg_in21k', not 'vit_digits_p8'"):
        load_backbone_weights(create_vit("vit_digits_p8"), path, model="vit_digits_p8")
    load_backbone_weights(create_vit("vit_digits_p8"), path)                 # no model named: not checked
