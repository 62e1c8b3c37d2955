"""IntactRegularizer on any network: Conv2d / BatchNorm drift bounds against brute force, the certificate of
a Conv/BN network, the conv hypercube's granularity, and frozen snapshots that stay frozen."""

from __future__ import annotations

import itertools
from collections import OrderedDict

import pytest
import torch
from torch import nn

from intact.config import resolve_run
from intact.methods.shared.base import enter_task, leave_task, trainable_state
from intact.settings import IntactConfig
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.interval import layer_drift_bounds, sequential_drift_bounds
from intact.regularizers.regularizer import HypercubeTracker, IntactRegularizer, frozen_copy
from intact.restore import build_method
from test_guard import CNN, _train_cnn, digits  # noqa: F401  (the conv-BN network trained on the tiny digits)


def _box(shape, g):
    a, b = torch.randn(*shape, generator=g, dtype=torch.float64), torch.randn(*shape, generator=g, dtype=torch.float64)
    return torch.minimum(a, b), torch.maximum(a, b)


def _corners(lower, upper):
    mask = torch.tensor(list(itertools.product([0.0, 1.0], repeat=lower.numel())), dtype=lower.dtype)
    return (lower.flatten() + mask * (upper - lower).flatten()).view(-1, *lower.shape)


def _perturb(m: nn.Module, g: torch.Generator, scale: float = 0.3) -> None:
    with torch.no_grad():
        for p in m.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


CONVS = [  # (in, out, kernel, stride, padding, dilation, groups, H, W): every patch has at most 12 inputs
    (1, 2, 2, 1, 0, 1, 1, 3, 3), (2, 3, 2, 1, 1, 1, 1, 3, 2), (1, 2, 3, 2, 1, 1, 1, 3, 4),
    (2, 2, 2, 1, 0, 1, 2, 3, 3), (1, 1, 2, 1, 0, 2, 1, 4, 3),
]


@pytest.mark.parametrize("spec", CONVS)
def test_conv2d_drift_bound_equals_brute_force_over_each_output_patch(spec):
    cin, cout, k, stride, pad, dil, groups, H, W = spec
    g = torch.Generator().manual_seed(sum(spec))
    old = nn.Conv2d(cin, cout, k, stride, pad, dil, groups).double()
    new = frozen_copy(old)
    _perturb(new, g)
    lower, upper = _box((cin, H, W), g)
    lo, hi = layer_drift_bounds(new, old, lower, upper)
    # brute force: every corner of the whole (small) input box reaches every output patch's extremes
    pts = _corners(lower, upper)
    drift = new(pts) - old(pts)
    torch.testing.assert_close(lo, drift.min(0).values)
    torch.testing.assert_close(hi, drift.max(0).values)


@pytest.mark.parametrize("kind", ["1d", "2d"])
def test_batchnorm_drift_bound_equals_brute_force_even_when_running_statistics_move(kind):
    g = torch.Generator().manual_seed(3)
    old = (nn.BatchNorm1d(3) if kind == "1d" else nn.BatchNorm2d(2)).double().eval()
    with torch.no_grad():
        old.running_mean.copy_(torch.randn(old.num_features, generator=g))
        old.running_var.copy_(torch.rand(old.num_features, generator=g) + 0.5)
    new = frozen_copy(old)
    _perturb(new, g)
    shape = (3,) if kind == "1d" else (2, 2, 2)
    lower, upper = _box(shape, g)
    pts = _corners(lower, upper)
    for moved in (False, True):
        if moved:
            new.running_mean.add_(0.5)
            new.running_var.mul_(2.0)
        lo, hi = layer_drift_bounds(new, old, lower, upper)
        drift = new(pts) - old(pts)
        torch.testing.assert_close(lo, drift.min(0).values)
        torch.testing.assert_close(hi, drift.max(0).values)


def _cnn() -> nn.Sequential:
    return nn.Sequential(OrderedDict(
        conv0=nn.Conv2d(1, 3, 3, padding=1), bn0=nn.BatchNorm2d(3), act0=nn.ReLU(),
        conv1=nn.Conv2d(3, 2, 2, stride=2), act1=nn.LeakyReLU(0.1), flat=nn.Flatten(), fc0=nn.Linear(2 * 2 * 2, 3),
    )).double()


@pytest.mark.parametrize("seed", range(5))
def test_certificate_of_a_conv_bn_network_is_never_below_the_sampled_drift(seed):
    g = torch.Generator().manual_seed(seed)
    old = _cnn().eval()
    with torch.no_grad():
        old.bn0.running_mean.copy_(torch.randn(3, generator=g))
        old.bn0.running_var.copy_(torch.rand(3, generator=g) + 0.5)
    new = frozen_copy(old)
    _perturb(new, g, 0.2)
    lower, upper = _box((1, 4, 4), g)
    lo, hi = sequential_drift_bounds(list(new), list(old), lower, upper)
    x = torch.cat([lower[None], upper[None],
                   lower + torch.rand(5000, 1, 4, 4, generator=g, dtype=torch.float64) * (upper - lower)])
    drift = new(x) - old(x)
    assert (drift >= lo - 1e-9).all() and (drift <= hi + 1e-9).all()
    zl, zh = sequential_drift_bounds(list(old), list(old), lower, upper)       # unchanged network: zero
    assert float(zl.abs().max()) == 0.0 and float(zh.abs().max()) == 0.0


def test_regularizer_protects_conv_and_batchnorm_layers_and_certifies_the_network():
    torch.manual_seed(0)
    net = _cnn().float()
    cfg = IntactConfig(lambda_intdrift=1.0, lambda_feat=1.0, lambda_var=1.0, lambda_align=1.0)
    reg = IntactRegularizer(cfg, net, ["conv0", "bn0", "conv1", "fc0"], feature="fc0")
    x = torch.rand(32, 1, 4, 4)
    net.eval()
    acts = reg.collect(net, [x[:16], x[16:]])
    assert acts["conv0"].shape == (32, 1, 4, 4) and acts["bn0"].shape == (32, 3, 4, 4) and acts["fc0"].shape == (32, 8)
    info = reg.end_task(0, acts)
    assert reg.hypercubes["bn0"].lower.shape == (3, 4, 4)          # one interval per (channel, position)
    assert set(info["hypercube"]) == {"conv0", "bn0", "conv1", "fc0"}
    reg.begin_task(1)
    net(x)                                                          # eval mode: BatchNorm statistics unchanged
    terms = reg.penalty(teacher=lambda t: reg.teacher_feature(x))
    assert terms["intdrift"].item() == 0.0 and terms["feat"].item() == 0.0   # nothing moved yet
    net.train()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05)
    net(x)
    # training: student and teacher both normalise with the batch's statistics (docs/protocols.md, L_Feat);
    # here the teacher's batch-statistics features fall outside the eval-mode box, so L_Feat's gate is shut
    terms = reg.penalty(teacher=lambda t: reg.teacher_feature(x))
    assert terms["intdrift"].item() > 0 and terms["feat"].item() >= 0
    sum(v for k, v in terms.items() if k != "feat_gate").backward()
    assert net.bn0.weight.grad.abs().sum() > 0 and net.conv0.weight.grad.abs().sum() > 0
    net.eval()
    net(x)                                                          # eval mode: the moved weights drift
    assert reg.penalty(teacher=lambda t: reg.teacher_feature(x))["feat"].item() > 0
    info = reg.end_task(1, reg.collect(net, [x]))
    assert info["certificate"] >= info["sampled_drift"] > 0


def test_per_position_conv_box_is_tighter_than_a_per_channel_box():
    """Why the conv hypercube is per (channel, position): digit images are quiet at the borders, a
    per-channel box gives every position the widest interval any position has, so its drift bound -
    what L_IntDrift pushes down - covers inputs no task ever produced."""
    from intact.data.digits import load_digit_images

    x, _ = load_digit_images(8)
    element = Hypercube.from_activations(x, 5.0)
    per_channel = Hypercube.from_activations(x.transpose(0, 1).reshape(1, -1).T, 5.0)   # (1,) over N*H*W
    channel = Hypercube(per_channel.lower.view(1, 1, 1).expand_as(element.lower),
                        per_channel.upper.view(1, 1, 1).expand_as(element.upper))
    assert (channel.lower <= element.lower).all() and (channel.upper >= element.upper).all()
    assert float(element.width.mean()) < 0.8 * float(channel.width.mean())
    g = torch.Generator().manual_seed(0)
    old = nn.Conv2d(1, 4, 3, padding=1)
    new = frozen_copy(old)
    _perturb(new, g, 0.1)
    with torch.no_grad():
        e_lo, e_hi = layer_drift_bounds(new, old, element.lower, element.upper)
        c_lo, c_hi = layer_drift_bounds(new, old, channel.lower, channel.upper)
    assert (e_lo >= c_lo - 1e-6).all() and (e_hi <= c_hi + 1e-6).all()
    assert float((e_hi - e_lo).mean()) < float((c_hi - c_lo).mean())


def test_snapshots_stay_in_eval_mode_when_the_method_trains():
    """method.train() must not reach the teacher or LwF's previous model (DualPrompt's teacher in
    training mode would use the previous task's own E-prompt instead of its best key)."""
    from conftest import tiny_config
    from intact.config import resolve_run
    from intact.methods import create_method
    from intact.models.backbone import FrozenViT, create_vit

    torch.manual_seed(0)
    backbone = FrozenViT(create_vit("vit_digits_p8"), (0.5,), (0.5,))
    x = torch.rand(4, 1, 32, 32)
    for name in ("dualprompt+intact", "lwf"):
        method = create_method(resolve_run(tiny_config(), "digits", name, 0), backbone, 10, 3)
        enter_task(method, 0, None)
        method.intact.tracker.hypercubes = {"fc0": Hypercube(-torch.ones(64), torch.ones(64))}
        enter_task(method, 1, None)
        method.train()
        books = method.intact.tracker
        own = [books.teacher] if name.endswith("+intact") else list(method.penalties[0].previous.values())
        snapshots = [books.previous] + own
        assert all(not m.training for s in snapshots for m in s.modules())
        state = trainable_state(method)
        assert not any(k.startswith(("backbone.", "teacher.",
                                     "previous.")) for k in state) and "head.fc0.weight" in state
    # DualPrompt's teacher after task 1 picks each image's best key among tasks 0-1 (not E-prompt 1 for all)
    method = create_method(resolve_run(tiny_config(), "digits", "dualprompt+intact", 0), backbone, 10, 3)
    enter_task(method, 0, None)
    enter_task(method, 1, None)
    q = method.query(x)
    with torch.no_grad():
        method.pool.keys[0].copy_(q[0])
        method.pool.keys[1].copy_(-q[0])
    enter_task(method, 2, None)
    method.train()
    _, idx = method.intact.tracker.teacher.select(q)
    assert int(method.intact.tracker.teacher.task) == 1 and idx[0] == 0

# ==== moved from tests/test_audit_fixes.py (issue 17): the certificate, L_Feat through BatchNorm

# ---- 6: the certificate in eval mode ---------------------------------------------------------------------

def _after_task0(digits, tmp_path):
    cfg, manifest = digits
    if not (tmp_path / "task0/state.safetensors").exists():
        _train_cnn(cfg, manifest, CNN, tmp_path)
    run = resolve_run(cfg, "digits", CNN, 0)
    bench, method, _ = build_method(run, manifest, tmp_path / "unused.safetensors", torch.device("cpu"),
                                   state=tmp_path / "task0/state.safetensors",
                                   hypercubes=tmp_path / "task0/hypercube.safetensors", state_task=0)
    train_set = method.training_data(bench, 1)
    enter_task(method, 1, train_set)
    torch.manual_seed(0)
    with torch.no_grad():  # a large update, so that the drift is far from zero
        for p in method.model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return method, train_set


@pytest.mark.slow
def test_the_certificate_is_computed_in_eval_mode_whatever_the_callers_mode(digits, tmp_path):
    method, train_set = _after_task0(digits, tmp_path)
    twin, _ = _after_task0(digits, tmp_path)                              # the same state, loaded again
    stats = {k: v.clone() for k, v in method.model.state_dict().items() if "running" in k}
    method.train()
    info = leave_task(method, 1, train_set)
    assert method.training                                               # the caller's mode is restored
    after = method.model.state_dict()
    assert all(torch.equal(stats[k], after[k]) for k in stats)            # the samples left the statistics alone
    twin.eval()
    ref = leave_task(twin, 1, train_set)
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
    feat = reg.penalty(teacher=lambda t: reg.teacher_feature(x))["feat"].detach()
    assert float(feat) == pytest.approx(0.0, abs=1e-10)
    # training: the student normalises with the batch's statistics, and so must the teacher
    model.train()
    model(x)
    terms = reg.penalty(teacher=lambda t: reg.teacher_feature(x))
    assert float(terms["feat"].detach()) == pytest.approx(0.0, abs=1e-10)
    assert all(torch.equal(v, reg.teacher.state_dict()[k]) for k, v in teacher_stats.items())  # teacher untouched

@pytest.mark.parametrize("noisy", ["batchnorm", "dropout"])
def test_the_component_certifies_and_collects_in_eval_mode_whatever_the_callers_mode(noisy):
    """Called directly on a model in train mode (as the module docstring shows), ``collect``, ``end_task`` and
    ``certificate`` use eval mode themselves: BatchNorm's running statistics never move, the sampled drift stays
    under the certificate (with Dropout in train mode it would not), and every module's mode is restored."""
    torch.manual_seed(0)
    mid = nn.BatchNorm1d(16) if noisy == "batchnorm" else nn.Dropout(0.5)
    model = nn.Sequential(nn.Linear(6, 16), mid, nn.ReLU(), nn.Linear(16, 3))
    with torch.no_grad():                                   # non-trivial running statistics
        model.train()(torch.randn(64, 6) * 2 + 1)
    model.train()
    model[3].eval()                                         # a mixed caller state, to be restored as it was
    modes = [m.training for m in model.modules()]
    buffers = [b.clone() for b in model.buffers()]
    reg = HypercubeTracker(model, ["0", "3"])
    batches = [torch.randn(32, 6) for _ in range(4)]
    reg.end_task(0, reg.collect(model, batches))
    reg.begin_task(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))       # small: train-mode dropout noise would dominate
    info = reg.end_task(1, reg.collect(model, batches))
    direct = reg.certificate(*reg._chain("0"), reg.protected["0"])
    assert [m.training for m in model.modules()] == modes
    assert all(torch.equal(a, b) for a, b in zip(buffers, model.buffers()))
    for out in (info, direct):
        assert 0 < out["sampled_drift"] <= out["certificate"]
