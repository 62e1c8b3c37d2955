"""The divergence guard: a non-finite loss term, gradient or parameter fails the job loudly, keeps the last good
epoch checkpoint and writes no task result; ``optim.on_nonfinite: skip_batch`` skips and counts such batches."""

import json
import math

import pytest
import torch

from conftest import tiny_config
from intact.config import benchmark_config, resolve_run
from intact.data import benchmark_class
from intact.guard import DivergenceGuard, NonFiniteError
from intact.io import load_checkpoint, load_tensors, read_json
from intact.regularizers.hypercube import Hypercube
from intact.restore import build_method
from intact.train import train_task

METHOD = "coda_p+intact@optim.epochs=2"


class _NanGrad(torch.autograd.Function):
    """Identity forward, NaN backward: finite terms and loss, non-finite gradients."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * float("nan")


def inject(monkeypatch, at: set[int], kind: str = "term") -> None:
    """Make the loss of the given (0-based) calls non-finite: a NaN 'ce' term, or NaN gradients only."""
    import intact.train
    from intact.methods.shared import base

    # wrap the loss the job computes (the module's own, never an earlier injection of the same test)
    original = base.batch_loss
    calls = {"n": 0}

    def loss(method, x, y):
        total, terms = original(method, x, y)
        if calls["n"] in at:
            if kind == "term":
                terms = {**terms, "ce": terms["ce"] * float("nan")}
                total = total * float("nan")
            else:
                total = _NanGrad.apply(total)
        calls["n"] += 1
        return total, terms

    monkeypatch.setattr(intact.train, "batch_loss", loss)


def _train(bench, tmp_path, method=METHOD, **kw):
    run = resolve_run(bench["config"], "digits", method, 0)
    return train_task(run, 0, manifest=bench["manifest"], backbone_weights=bench["weights"], out_dir=tmp_path / "task0",
                      threads=1, progress=False, **kw)


def test_nan_term_stops_the_job_and_keeps_the_last_good_epoch_checkpoint(tiny_bench, tmp_path, monkeypatch):
    steps = 11                                   # 647 training images / batch 64
    inject(monkeypatch, {steps + 2})             # epoch 2, step 3
    with pytest.raises(NonFiniteError) as err:
        _train(tiny_bench, tmp_path)
    msg = str(err.value)
    for fragment in ("run digits/coda_p+intact@optim.epochs=2/seed0", "task 0", "epoch 2/2", f"step 3/{steps}",
                     "loss term 'ce'", "checkpoint.pt is kept", "no state.safetensors or train.json"):
        assert fragment in msg, msg
    task = tmp_path / "task0"
    assert sorted(p.name for p in task.iterdir()) == ["checkpoint.pt"]      # no result, no temporary file
    ck = load_checkpoint(task / "checkpoint.pt")
    assert (ck["epoch"], ck["step"]) == (1, 0)                               # the good epoch-1 checkpoint
    assert all(torch.isfinite(v).all() for v in ck["method"].values())


def test_nan_gradient_is_named_when_terms_are_finite(tiny_bench, tmp_path, monkeypatch):
    inject(monkeypatch, {4}, kind="grad")
    with pytest.raises(NonFiniteError) as err:
        _train(tiny_bench, tmp_path)
    assert "step 5/11" in str(err.value) and "the gradient of '" in str(err.value), str(err.value)
    assert "no checkpoint had been written" in str(err.value)
    assert not (tmp_path / "task0").exists() or not any((tmp_path / "task0").iterdir())


def test_skip_batch_counts_skipped_batches_and_fails_past_the_allowed_fraction(tiny_bench, tmp_path, monkeypatch):
    inject(monkeypatch, {3, 15})
    record = _train(tiny_bench, tmp_path / "a",
                    f"{METHOD},optim.on_nonfinite=skip_batch,optim.max_skipped_fraction=0.1")
    assert record["nonfinite"] == {"policy": "skip_batch", "skipped_batches": 2, "skipped_at": [[0, 3], [1, 4]],
                                   "max_skipped": 2}
    stored = json.loads((tmp_path / "a/task0/train.json").read_text())
    assert stored["nonfinite"]["skipped_batches"] == 2
    assert all(v == v for e in stored["epochs"] for v in e.values())          # the skipped NaNs never reach a record

    inject(monkeypatch, {3, 15, 16})                                          # 3 > 10% of 22 steps
    with pytest.raises(NonFiniteError) as err:
        _train(tiny_bench, tmp_path / "b", f"{METHOD},optim.on_nonfinite=skip_batch,optim.max_skipped_fraction=0.1")
    assert "3 batches" in str(err.value) and "max_skipped_fraction" in str(err.value)
    assert not (tmp_path / "b/task0/train.json").exists() and not (tmp_path / "b/task0/state.safetensors").exists()


def test_skipped_batches_survive_a_resume(tiny_bench, tmp_path, monkeypatch):
    """The skip count is part of the checkpoint: a job preempted after a skipped batch and resumed records the
    same skips and ends bit-identical to the uninterrupted job."""
    from intact.io import load_tensors
    from intact.train import Preempted

    method = f"{METHOD},optim.on_nonfinite=skip_batch,optim.max_skipped_fraction=0.1"
    inject(monkeypatch, {2})
    whole = _train(tiny_bench, tmp_path / "whole", method)
    inject(monkeypatch, {2})
    with pytest.raises(Preempted):
        _train(tiny_bench, tmp_path / "cut", method, max_steps=5)
    inject(monkeypatch, set())                   # the resumed job starts after the bad batch
    resumed = _train(tiny_bench, tmp_path / "cut", method)
    assert resumed["resumed_from"] == {"epoch": 0, "step": 5}
    assert resumed["nonfinite"] == whole["nonfinite"] and whole["nonfinite"]["skipped_batches"] == 1
    assert resumed["epochs"][0]["ce"] == whole["epochs"][0]["ce"]
    a = load_tensors(tmp_path / "whole/task0/state.safetensors")
    b = load_tensors(tmp_path / "cut/task0/state.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_guard_order_terms_then_gradients_then_parameters():
    """On the device, with no sync until check: the first step and the first non-finite name win."""
    w = torch.nn.Parameter(torch.ones(3))
    v = torch.nn.Parameter(torch.ones(2))
    guard = DivergenceGuard("b/m/seed0", 1, 2, 4, [("w", w), ("v", v)], torch.device("cpu"))
    loss = (w.sum() + v.sum())
    loss.backward()
    guard.observe(loss, {"ce": loss.detach()})
    guard.check("x")                                                     # all finite: no error
    with torch.no_grad():
        v.fill_(float("inf"))                                            # parameter only
    guard.observe(loss, {"ce": loss.detach()})
    w.grad.fill_(float("nan"))                                           # a later step: gradient + term
    guard.observe(loss, {"ce": torch.tensor(float("nan"))})
    with pytest.raises(NonFiniteError) as err:
        guard.check("kept")
    assert "task 1, epoch 1/2, step 2/4: the parameter 'v'" in str(err.value), str(err.value)

    g2 = DivergenceGuard("b/m/seed0", 0, 1, 4, [("w", w), ("v", v)], torch.device("cpu"), start_step=2)
    g2.observe(loss, {"ce": loss.detach(), "var": torch.tensor(float("inf"))})
    with pytest.raises(NonFiniteError, match=r"step 3/4: the loss term 'var'"):
        g2.check("kept")


def test_an_empty_parameter_is_finite_and_does_not_stop_the_guard():
    """ESN's prompt of length 0 (declared minimum 0) is an empty parameter: torch's max |x| has no identity for it,
    which failed every step before 2026-11-30."""
    w, empty = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.zeros(0, 4))
    guard = DivergenceGuard("b/m/seed0", 0, 1, 4, [("empty", empty), ("w", w)], torch.device("cpu"))
    loss = w.sum() + empty.sum()
    loss.backward()
    assert empty.grad is not None and empty.grad.numel() == 0
    guard.observe(loss, {"ce": loss.detach()})
    assert guard.batch_ok(loss, {"ce": loss.detach()}, 0, 0)
    guard.check("x")
    with torch.no_grad():
        w.fill_(float("nan"))
    guard.observe(loss, {"ce": loss.detach()})
    with pytest.raises(NonFiniteError, match="the parameter 'w'"):
        guard.check("kept")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the no-sync property is about a GPU)")
def test_guard_observe_never_synchronises_with_the_gpu():
    """The default policy's per-step work is device-only: CUDA's sync debug mode raises on any sync."""
    dev = torch.device("cuda")
    w = torch.nn.Parameter(torch.ones(3, device=dev))
    guard = DivergenceGuard("b/m/seed0", 0, 1, 8, [("w", w)], dev)
    loss = (w * w).sum()
    loss.backward()
    terms = {"ce": loss.detach(), "var": loss.detach() * float("inf")}
    guard.observe(loss, terms)                  # the first step of a name set uploads its index (once)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            guard.observe(loss, terms)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    with pytest.raises(NonFiniteError, match="step 1/8: the loss term 'var'"):
        guard.check("kept")

# ==== moved from tests/test_audit_fixes.py (issue 17): the guard and BatchNorm ==========
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


def _train_cnn(cfg, manifest, method, out, task=0, **kw):
    run = resolve_run(cfg, "digits", method, 0)
    return train_task(run, task, manifest=manifest, backbone_weights=out / "unused.safetensors",
                      out_dir=out / f"task{task}",
                      prev_dir=out / f"task{task - 1}" if task else None, threads=1, progress=False, **kw)


# ---- 5: the divergence guard and BatchNorm ---------------------------------------------------------------

@pytest.mark.slow
def test_a_skipped_batch_leaves_batchnorm_statistics_as_they_were(digits, tmp_path, monkeypatch):
    """One NaN pixel at step 3 of a conv-BN network: the batch is skipped, and neither the saved running
    statistics nor the evaluation logits are non-finite."""
    import intact.train
    from intact.methods.shared import base

    cfg, manifest = digits
    calls = {"n": 0}

    def loss(method, x, y):
        if calls["n"] == 2:
            x = x.clone()
            x[0, 0, 0, 0] = float("nan")
        calls["n"] += 1
        return base.batch_loss(method, x, y)

    monkeypatch.setattr(intact.train, "batch_loss", loss)
    rec = _train_cnn(cfg, manifest, CNN + SKIP, tmp_path, eval_out=tmp_path / "eval.json")
    assert rec["nonfinite"]["skipped_batches"] == 1 and rec["nonfinite"]["skipped_at"] == [[0, 2]]
    state = load_tensors(tmp_path / "task0/state.safetensors")
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    assert not bad, f"non-finite saved tensors: {bad}"
    assert all(math.isfinite(a) for a in read_json(tmp_path / "eval.json")["accuracy"])
    # the evaluation logits of the saved state are finite (an accuracy is finite even for NaN logits)
    run = resolve_run(cfg, "digits", CNN + SKIP, 0)
    bench, method, _ = build_method(run, manifest, tmp_path / "unused.safetensors", torch.device("cpu"),
                                   state=tmp_path / "task0/state.safetensors", state_task=0)
    x, _ = bench.eval_set(0)[0]
    with torch.no_grad():
        assert torch.isfinite(method.eval().predict(x[None])).all()


@pytest.mark.slow
def test_the_guard_refuses_to_save_a_non_finite_tensor_of_the_task(digits, tmp_path, monkeypatch):
    """A non-finite hypercube (or buffer) is never written: the job fails naming it, no state is saved."""
    from intact.methods.shared.base import ContinualMethod as ProtectedMethod
    from intact.methods.shared.penalties import kept_hypercubes

    cfg, manifest = digits
    original = ProtectedMethod.end_task

    def end_task(self, task, train_set):
        info = original(self, task, train_set)
        cube = kept_hypercubes(self)["fc0"]
        cube.upper[0] = float("inf")
        return info

    monkeypatch.setattr(ProtectedMethod, "end_task", end_task)
    with pytest.raises(NonFiniteError, match=r"hypercube 'fc0'"):
        _train_cnn(cfg, manifest, CNN, tmp_path)
    assert not (tmp_path / "task0/state.safetensors").exists() and not (tmp_path / "task0/train.json").exists()


def test_the_guard_names_a_non_finite_buffer():
    from intact.guard import check_saved

    good = {"model.bn0.running_mean": torch.zeros(2), "model.bn0.num_batches_tracked": torch.tensor(3)}
    check_saved("run r", 0, good, {"fc0": Hypercube(torch.zeros(2), torch.ones(2))})
    with pytest.raises(NonFiniteError, match=r"buffer or parameter 'fisher.model.fc0.weight'"):
        check_saved("run r", 0, {**good, "fisher.model.fc0.weight": torch.tensor([1.0, float("nan")])}, {})

def _bn_guard(policy: str) -> tuple[torch.nn.Module, DivergenceGuard]:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
    guard = DivergenceGuard("b/m/seed0", 0, 1, 4, list(model.named_parameters()), torch.device("cpu"),
                            policy=policy, max_skipped_fraction=0.5, buffers=list(model.named_buffers()))
    return model, guard


def _step(model: torch.nn.Module, guard: DivergenceGuard, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
    guard.snapshot()
    loss = model(x).pow(2).mean()
    model.zero_grad()
    loss.backward()
    return loss, {"ce": loss.detach()}


def test_a_finite_loss_batch_whose_batchnorm_variance_overflows_is_skipped_and_restored():
    """float32 inputs of 1e20: the batch variance (1e40) overflows to inf in running_var, the normalised output
    (x - mean) / sqrt(inf) and so the loss stay finite. skip_batch skips it and restores the statistics."""
    torch.manual_seed(0)
    model, guard = _bn_guard("skip_batch")
    bn = model[1]
    _step(model, guard, torch.randn(8, 3))                       # a good batch first: statistics move
    assert guard.batch_ok(*_step(model, guard, torch.randn(8, 3)), epoch=0, step=0)
    before = [b.clone() for b in bn.buffers()]
    guard.snapshot()
    huge = torch.randn(8, 3) * 1e20
    with torch.no_grad():
        model[0].weight.fill_(1.0)
    loss, terms = _step(model, guard, huge)
    assert torch.isfinite(loss) and not torch.isfinite(bn.running_var).all()   # the case: finite loss, inf statistic
    assert not guard.batch_ok(loss, terms, epoch=0, step=1)
    assert guard.skipped == [[0, 1]]
    assert all(torch.equal(a, b) for a, b in zip(before, bn.buffers()))


def test_under_stop_a_non_finite_running_statistic_stops_the_job_naming_it():
    model, guard = _bn_guard("stop")
    with torch.no_grad():
        model[0].weight.fill_(1.0)
    loss, terms = _step(model, guard, torch.randn(8, 3) * 1e20)
    assert torch.isfinite(loss)
    guard.observe(loss, terms)
    with pytest.raises(NonFiniteError, match=r"the buffer '1.running_var' went non-finite"):
        guard.check("kept")


def test_a_pretraining_that_diverges_writes_no_backbone(tiny_bench, tmp_path):
    """At lr 1000 the digits ViT's pretraining ends with NaN weights (54 of its tensors on this machine); they were
    saved, and every run on the backbone then stopped at its first step, the guard blaming the run's own rates."""
    import dataclasses

    from intact.config import backbone_config
    from intact.pretrain import pretrain_backbone

    cfg = backbone_config(tiny_bench["config"], "vit_digits")
    diverging = dataclasses.replace(cfg, pretrain=dataclasses.replace(cfg.pretrain, lr=1e3, epochs=1))
    with pytest.raises(NonFiniteError, match=r"backbone 'vit_digits': pretraining left '.+' not finite \(NaN or Inf\), "
                                             r"so no weights were written: lower backbones.vit_digits.pretrain.lr "
                                             r"\(now 1000\)"):
        pretrain_backbone(diverging, tiny_bench["manifest"], tmp_path / "w.safetensors", tmp_path / "w.json",
                          threads=1, progress=False, benchmark=benchmark_config(tiny_bench["config"], "digits"))
    assert not (tmp_path / "w.safetensors").exists() and not (tmp_path / "w.json").exists()
