"""Feature caches (intact.cache): a cached run equals the live run bit for bit on CPU, and reads its caches."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch

from intact.cache import build_query_cache, variants
from intact.config import resolve_run, validate_config
from intact.evaluate import evaluate_task
from intact.io import load_tensors, read_json
from intact.models.backbone import FrozenViT
from intact.train import train_task

# the image-benchmark fixtures (synthetic trees in the real layouts, a small RGB ViT)
from test_image_benchmarks import paper_like_config, prepared, tree, weights  # noqa: F401

from conftest import CPU_CLAIM


def _run(cfg: dict, bench: str, method: str, cache: bool):
    cfg = copy.deepcopy(cfg)
    cfg["optim"]["feature_cache"] = cache
    validate_config(cfg)
    return resolve_run(cfg, bench, method, 0)


def _train_eval(run, manifest: Path, weights: Path, out: Path, tasks: int, query_cache: Path | None):
    """Train and evaluate ``tasks`` tasks; return R (one accuracy list per task) and the last state."""
    R = []
    for t in range(tasks):
        d = out / f"task{t}"
        train_task(run, t, manifest=manifest, backbone_weights=weights, out_dir=d,
                   prev_dir=out / f"task{t - 1}" if t else None, threads=1, progress=False, query_cache=query_cache)
        R.append(evaluate_task(run, t, manifest=manifest, backbone_weights=weights, state=d / "state.safetensors",
                               out_path=d / "eval.json", threads=1, query_cache=query_cache)["accuracy"])
    return R, load_tensors(out / f"task{tasks - 1}" / "state.safetensors"), out


def _assert_identical(live, cached):
    (R0, s0, d0), (R1, s1, d1) = live, cached
    assert R0 == R1
    assert s0.keys() == s1.keys() and all(torch.equal(s0[k], s1[k]) for k in s0)
    for t in range(len(R0)):
        a, b = read_json(d0 / f"task{t}" / "train.json"), read_json(d1 / f"task{t}" / "train.json")
        assert [e["ce"] for e in a["epochs"]] == [e["ce"] for e in b["epochs"]]
        assert a["hypercube"] == b["hypercube"] and a["certificate"] == b["certificate"]
        assert a["config_hash"] != b["config_hash"]  # feature_cache: false is a setting of its own
        assert not a["feature_cache"]["used"] and b["feature_cache"]["used"]


@CPU_CLAIM
def test_digits_cached_run_equals_live_run_bit_for_bit(tiny_bench, tmp_path):
    cfg, manifest, w = tiny_bench["config"], tiny_bench["manifest"], tiny_bench["weights"]
    cached_run = _run(cfg, "digits", "coda_p+intact", True)
    qdir = tmp_path / "query"
    meta = build_query_cache(cached_run.backbone, manifest, w, qdir, threads=1, progress=False)
    assert set(meta["files"]) == {f"{s}{t}" for s in ("train", "test") for t in range(3)}
    live = _train_eval(_run(cfg, "digits", "coda_p+intact", False), manifest, w, tmp_path / "live", 2, None)
    cached = _train_eval(cached_run, manifest, w, tmp_path / "cached", 2, qdir)
    _assert_identical(live, cached)
    rec = read_json(tmp_path / "cached" / "task1" / "train.json")["feature_cache"]
    assert rec["query"].startswith("read from") and rec["variants"] == 1 and "teacher" in rec


@pytest.mark.slow
@CPU_CLAIM
def test_flipped_images_cached_run_equals_live_run_bit_for_bit(prepared, tree, weights, tmp_path):  # noqa: F811
    cfg = paper_like_config(tree, weights)
    cfg["run"]["benchmarks"] = ["imagenet_r"]
    cfg["optim"]["epochs"] = 2  # two epochs: both flips of most images are seen
    manifest = prepared["imagenet_r"]
    live = _train_eval(_run(cfg, "imagenet_r", "coda_p+intact", False), manifest, weights, tmp_path / "live", 2, None)
    # no stored cache: the query cache is computed at the start of each task (both flips)
    cached = _train_eval(_run(cfg, "imagenet_r", "coda_p+intact", True), manifest, weights, tmp_path / "cached", 2,
                         None)
    _assert_identical(live, cached)
    rec = read_json(tmp_path / "cached" / "task1" / "train.json")["feature_cache"]
    assert rec["variants"] == 2 and rec["query"] == "computed at the start of the task"


def test_random_crop_falls_back_to_the_live_path_and_says_so(prepared, tree, weights, tmp_path):  # noqa: F811
    from intact.data import open_benchmark

    bench = open_benchmark(prepared["imagenet_c"])
    assert variants(bench.train_set(0)) is None and variants(bench.eval_set(0)) == 1
    cfg = paper_like_config(tree, weights)
    cfg["run"]["benchmarks"] = ["imagenet_c"]
    run = _run(cfg, "imagenet_c", "coda_p+intact", True)
    rec = train_task(run, 0, manifest=prepared["imagenet_c"], backbone_weights=weights, out_dir=tmp_path,
                     threads=1, progress=False)
    assert rec["feature_cache"]["used"] is False and "random crop" in rec["feature_cache"]["reason"]


@pytest.mark.parametrize("cache", [True, False])
def test_a_cached_step_makes_one_backbone_pass(tiny_bench, tmp_path, monkeypatch, cache):
    """Count backbone passes inside each training step at task 1 of coda_p+intact: 1 with the caches
    (the prompted pass; query and teacher are read), 3 on the live path (query, student, teacher)."""
    cfg, manifest, w = tiny_bench["config"], tiny_bench["manifest"], tiny_bench["weights"]
    run = _run(cfg, "digits", "coda_p+intact", cache)
    qdir = tmp_path / "query"
    build_query_cache(run.backbone, manifest, w, qdir, batch_size=7, threads=1, progress=False)
    train_task(run, 0, manifest=manifest, backbone_weights=w, out_dir=tmp_path / "task0", threads=1,
               progress=False, query_cache=qdir)
    calls = {"query": 0, "prompted": 0}
    orig_query, orig_forward = FrozenViT.query, FrozenViT.forward

    def query(self, x):
        calls["query"] += 1
        return orig_query(self, x)

    def forward(self, x, prefix=None):
        if prefix:  # (an unprompted forward is counted as the query it calls)
            calls["prompted"] += 1
        return orig_forward(self, x, prefix)

    per_step = []
    import intact.train
    orig_loss = intact.train.batch_loss

    def loss(method, x, y):
        before = dict(calls)
        out = orig_loss(method, x, y)
        per_step.append({k: calls[k] - before[k] for k in calls})
        return out

    monkeypatch.setattr(FrozenViT, "query", query)
    monkeypatch.setattr(FrozenViT, "forward", forward)
    monkeypatch.setattr(intact.train, "batch_loss", loss)
    train_task(run, 1, manifest=manifest, backbone_weights=w, out_dir=tmp_path / "task1", prev_dir=tmp_path / "task0",
               threads=1, progress=False, query_cache=qdir)
    assert per_step
    expect = {"query": 0, "prompted": 1} if cache else {"query": 1, "prompted": 2}
    assert all(s == expect for s in per_step), per_step[:3]


def test_the_training_job_evaluates_as_evaluate_task_does(tiny_bench, tmp_path):
    """eval.json written by train_task (the in-memory state, one job) equals evaluate_task on the saved state."""
    cfg, manifest, w = tiny_bench["config"], tiny_bench["manifest"], tiny_bench["weights"]
    run = _run(cfg, "digits", "coda_p+intact", True)
    qdir = tmp_path / "query"
    build_query_cache(run.backbone, manifest, w, qdir, threads=1, progress=False)
    for t in range(2):
        d = tmp_path / f"task{t}"
        train_task(run, t, manifest=manifest, backbone_weights=w, out_dir=d,
                   prev_dir=tmp_path / f"task{t - 1}" if t else None,
                   threads=1, progress=False, query_cache=qdir, eval_out=d / "eval.json")
        again = evaluate_task(run, t, manifest=manifest, backbone_weights=w, state=d / "state.safetensors",
                              out_path=d / "again.json", threads=1)  # no query cache: the live path
        assert read_json(d / "eval.json")["accuracy"] == again["accuracy"]
        assert not (d / "checkpoint.pt").exists()

# ==== moved from tests/test_audit_fixes.py (issue 17): the query cache's staleness check =======

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


def test_an_edited_cache_file_is_refused_and_a_nan_query_stops_the_evaluation(tiny_bench, tmp_path):
    """A query cache's file is checked against the sha256 its listing holds before its first use; a NaN that reaches
    the logits anyway (here: a listing rewritten to match) stops the evaluation instead of counting argmax 0."""
    import json

    import numpy as np

    from intact.evaluate import evaluate_task
    from intact.guard import NonFiniteError
    from intact.hashing import sha256_file

    cfg = copy.deepcopy(tiny_bench["config"])
    cfg["optim"]["feature_cache"] = True
    run = resolve_run(cfg, "digits", "coda_p", 0)
    manifest, w, qdir = tiny_bench["manifest"], tiny_bench["weights"], tmp_path / "query"
    meta = build_query_cache(run.backbone, manifest, w, qdir, threads=1, progress=False)
    assert meta["sha256"]["test1"] == sha256_file(qdir / "test1.npy")
    train_task(run, 0, manifest=manifest, backbone_weights=w, out_dir=tmp_path / "task0", threads=1, progress=False)
    evaluate = lambda: evaluate_task(run, 0, manifest=manifest, backbone_weights=w,  # noqa: E731
                                     state=tmp_path / "task0/state.safetensors", out_path=tmp_path / "eval.json",
                                     threads=1, query_cache=qdir)
    evaluate()
    cached = np.load(qdir / "test1.npy", mmap_mode="r+")
    cached[:] = np.nan
    cached.flush()
    del cached
    with pytest.raises(ValueError, match=r"test1.npy is not the file query.json lists"):
        evaluate()
    listing = json.loads((qdir / "query.json").read_text())
    listing["sha256"]["test1"] = sha256_file(qdir / "test1.npy")
    (qdir / "query.json").write_text(json.dumps(listing))
    with pytest.raises(NonFiniteError, match=r"of \d+ images give a NaN or Inf logit"):
        evaluate()
    del listing["sha256"]
    (qdir / "query.json").write_text(json.dumps(listing))
    with pytest.raises(ValueError, match="lists no sha256 of its files .* `intact migrate results` adds them"):
        evaluate()
