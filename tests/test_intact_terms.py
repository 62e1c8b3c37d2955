"""The four InTAct terms follow the paper's equations."""

import pytest
import torch
from torch import nn

from intact.settings import IntactConfig
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.terms import align_loss, feat_loss, intdrift_loss, var_loss
from intact.regularizers.regularizer import HypercubeTracker, IntactRegularizer, frozen_copy


def _layer(seed=0):
    torch.manual_seed(seed)
    return nn.Linear(4, 3)


def test_intdrift_zero_for_unchanged_head_and_matches_formula():
    lin = _layer()
    cube = Hypercube(torch.tensor([-1.0, 0.0, 0.5, -2.0]), torch.tensor([1.0, 0.5, 1.5, 0.0]))
    old = frozen_copy(lin)
    assert float(intdrift_loss([("fc0", lin, old)], {"fc0": cube}, 1.0).detach()) == 0.0
    with torch.no_grad():
        lin.weight.add_(torch.tensor([[0.1, -0.2, 0.0, 0.3]] * 3))
        lin.bias.add_(torch.tensor([0.5, 0.0, -0.5]))
    dW = lin.weight - old.weight
    db = lin.bias - old.bias
    lo = dW.clamp_min(0) @ cube.lower - (-dW).clamp_min(0) @ cube.upper + db
    hi = dW.clamp_min(0) @ cube.upper - (-dW).clamp_min(0) @ cube.lower + db
    expected = (0.7 / 3 * (lo.pow(2) + hi.pow(2)).sum()).detach()
    assert float(intdrift_loss([("fc0", lin, old)], {"fc0": cube}, 0.7).detach()) == pytest.approx(float(expected))


def test_feat_loss_gates_per_sample_on_teacher_feature():
    cube = Hypercube(torch.zeros(2), torch.ones(2))
    teacher = torch.tensor([[0.5, 0.5], [2.0, 0.5], [0.2, 0.9]])   # in, out, in
    student = teacher + torch.tensor([[1.0, 0.0], [5.0, 5.0], [0.0, 2.0]])
    loss, gate = feat_loss(student, teacher, cube, 2.0)
    assert float(gate) == pytest.approx(2 / 3)
    assert float(loss) == pytest.approx(2.0 * (1.0 + 0.0 + 4.0) / 3)


def test_var_loss_is_mean_squared_distance_to_centroid():
    z = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 3.0]])
    c = z.mean(0)
    expected = ((z - c) ** 2).sum(1).mean()
    assert float(var_loss(z, 0.5)) == pytest.approx(0.5 * float(expected))
    assert float(var_loss(torch.ones(5, 3), 1.0)) == 0.0


def test_var_loss_under_the_reference_preset_is_the_authors_per_neuron_variance():
    """The authors' code (PromptInTAct regularization/interval_regularization.py) adds
    ``acts.var(dim=0, unbiased=False).mean()``: 1/d of the paper's sum, and the paper's λ_Var were tuned with it.
    `preset: reference` summed over neurons: L_Var 768 times the authors' on ViT-B/16 (before 2026-12-01)."""
    from conftest import REPO
    from intact.config import load_config, resolve_run

    z = torch.randn(64, 48, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    authors = 0.1 * z.var(dim=0, unbiased=False).mean()
    assert torch.allclose(var_loss(z, 0.1, "mean"), authors) and torch.allclose(var_loss(z, 0.1), 48 * authors)
    cfg = load_config(REPO / "config.yaml", check_files=False)
    assert resolve_run(cfg, "digits", "coda_p+intact@preset=reference", 0).intact.var_norm == "mean"
    assert resolve_run(cfg, "digits", "coda_p+intact", 0).intact.var_norm == "sum"


def test_align_loss_zero_when_batch_box_centred_on_previous_box():
    prev = Hypercube(torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0]))
    h = torch.tensor([[-0.5, 0.2], [0.5, -0.2], [0.0, 0.0]])
    assert float(align_loss(h, prev, 1.0, 0.0, 1e-8)) == pytest.approx(0.0, abs=1e-7)
    shifted = h + torch.tensor([3.0, 4.0])
    # ||c_t - c_prev||^2 / (r_prev + eps) = 25 / 1
    assert float(align_loss(shifted, prev, 1.0, 0.0, 1e-8)) == pytest.approx(25.0, rel=1e-6)


def test_align_loss_reads_the_batch_box_as_the_hypercube_does():
    """``percentile_method: index`` with ``align_form: paper``: the batch's box is taken as the task's hypercube
    is (before 2026-12-01 it was always interpolated); the regularizer passes its own percentile and method."""
    from intact.regularizers.hypercube import percentile

    h = torch.arange(20.0).reshape(10, 2) ** 2
    prev = Hypercube(torch.zeros(2), torch.ones(2))
    for method in ("linear", "index"):
        centre = (percentile(h, 5.0, method) + percentile(h, 95.0, method)) / 2
        expected = float((centre - 0.5).pow(2).sum() / (0.5 + 1e-8))
        assert float(align_loss(h, prev, 1.0, 5.0, 1e-8, method)) == pytest.approx(expected, rel=1e-6)
    assert float(align_loss(h, prev, 1.0, 5.0, 1e-8, "index")) != float(align_loss(h, prev, 1.0, 5.0, 1e-8))
    head = nn.Sequential(nn.Linear(2, 2))
    reg = IntactRegularizer(IntactConfig(percentile_method="index", lambda_align=1.0), head, ["0"])
    reg.hypercubes = {"0": prev}
    reg.begin_task(1)
    head(h)
    assert float(reg.penalty()["align"]) == float(align_loss(h, prev, 1.0, 5.0, reg.cfg.align_eps, "index"))


def _head_regularizer(cfg):
    head = nn.Sequential()
    head.add_module("fc0", _layer())
    return head, IntactRegularizer(cfg, head, ["fc0"], feature="fc0")


def test_penalty_respects_task_zero_and_switches():
    cfg = IntactConfig(lambda_intdrift=1.0, lambda_feat=1.0, lambda_var=1.0, lambda_align=1.0)
    head, reg = _head_regularizer(cfg)
    z = torch.randn(8, 4, requires_grad=True)
    reg.begin_task(0)
    head(z)                                           # the hook captures fc0's input
    assert reg.inputs["fc0"] is z
    assert set(reg.penalty()) == {"var"}              # only L_Var on the first task
    reg.hypercubes = {"fc0": Hypercube(-torch.ones(4), torch.ones(4))}
    reg.begin_task(1)
    head(z)
    later = reg.penalty(z_teacher=z.detach())
    assert {"var", "intdrift", "feat", "align", "feat_gate"} <= set(later)
    reg.cfg = IntactConfig(lambda_intdrift=0.0, lambda_feat=1.0, lambda_var=0.0, lambda_align=0.0)
    assert set(reg.penalty(teacher=lambda t: reg.teacher_feature(z))) == {"feat", "feat_gate"}
    # gradients reach the features through every loss term
    sum(v for k, v in later.items() if k != "feat_gate").backward()
    assert z.grad is not None and z.grad.abs().sum() > 0
    assert not hasattr(HypercubeTracker(head, ["fc0"]), "penalty")      # bookkeeping only: no terms
    with pytest.raises(TypeError, match=r"IntactRegularizer\(None, \.\.\.\) is gone: HypercubeTracker"):
        IntactRegularizer(None, head, ["fc0"])


def test_certificate_is_attained_at_a_corner_for_a_linear_head():
    head, reg = _head_regularizer(IntactConfig())
    reg.begin_task(1)                                  # anchors: the head as it is now
    lin = head.fc0
    with torch.no_grad():
        lin.weight.add_(0.1 * torch.randn(3, 4))
    cube = Hypercube(torch.tensor([-1.0, 0.0, 0.5, -2.0]), torch.tensor([1.0, 0.5, 1.5, 0.0]))
    info = reg.certificate(head, reg.previous, cube)
    import itertools
    pts = torch.tensor(list(itertools.product([0.0, 1.0], repeat=4))) * cube.width + cube.lower
    worst = float((lin(pts) - reg.previous.fc0(pts)).abs().max().detach())
    assert info["certificate"] == pytest.approx(worst, rel=1e-5)
    assert info["sampled_drift"] <= info["certificate"] + 1e-6
