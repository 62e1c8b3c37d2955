"""The reference-code preset: each deviation is a named switch; the paper's form is the default."""


import pytest
import torch

from conftest import tiny_config
from intact.config import resolve_run
from intact.methods.shared.base import batch_loss, enter_task
from intact.settings import IntactConfig
from intact.regularizers.hypercube import Hypercube, percentile
from intact.regularizers.terms import align_loss_reference, feat_loss_reference


def test_default_is_the_paper_and_preset_sets_every_switch():
    cfg = tiny_config()
    paper = resolve_run(cfg, "digits", "coda_p+intact", 0).intact
    assert paper == IntactConfig(**{**IntactConfig().__dict__, **cfg["intact"]})
    assert (paper.feat_gate, paper.align_form, paper.protected_layers, paper.percentile_method, paper.double_ce,
            paper.hypercube_source) == \
        ("teacher_sample", "paper", "all", "linear", False, "train")
    ref = resolve_run(cfg, "digits", "coda_p+intact@preset=reference", 0).intact
    assert (ref.feat_gate, ref.align_form, ref.protected_layers, ref.percentile_method, ref.double_ce) == \
        ("student_element", "reference", "cls", "index", True)
    assert ref.hypercube_source == "train"     # test data is never part of a preset
    mixed = resolve_run(cfg, "digits", "coda_p+intact@preset=reference,double_ce=false", 0).intact
    assert mixed.double_ce is False and mixed.feat_gate == "student_element"
    cfg["intact"]["preset"] = "reference"     # a preset in the config section works the same way
    assert resolve_run(cfg, "digits", "coda_p+intact", 0).intact.align_form == "reference"


def test_index_percentile():
    x = torch.arange(20, dtype=torch.float32).unsqueeze(1)
    assert float(percentile(x, 5, "index")) == 1.0 and float(percentile(x, 95, "index")) == 19.0
    assert float(percentile(x, 5, "linear")) == pytest.approx(0.95)


def test_reference_feat_gates_student_elements():
    cube = Hypercube(torch.zeros(2), torch.ones(2))
    student = torch.tensor([[0.5, 2.0], [0.2, 0.3]])    # 3 of 4 elements inside
    teacher = torch.tensor([[0.0, 0.0], [0.0, 1.3]])
    loss, frac = feat_loss_reference(student, teacher, cube, 1.0)
    assert float(frac) == 0.75
    assert float(loss) == pytest.approx((0.25 + 0.04 + 1.0) / 3)


def test_reference_align_uses_disjoint_neurons_only():
    box = Hypercube(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0]))   # centre (.5, .5), radius .5
    inside = torch.tensor([[0.2, 0.4], [0.8, 0.6]])
    assert float(align_loss_reference(inside, box, 1.0, 1e-8)) == 0.0   # as torch.norm of no neuron (it was 2e-6)
    moved = torch.tensor([[0.2, 3.0], [0.8, 4.0]])                        # neuron 1 interval [3, 4] misses the box
    assert float(align_loss_reference(moved, box, 1.0, 1e-8)) == pytest.approx(3.0 / 0.5, rel=1e-5)


def test_protected_layers_cls_keeps_only_the_cls_layer():
    from collections import OrderedDict

    from intact.regularizers.regularizer import IntactRegularizer

    head = torch.nn.Sequential(OrderedDict(fc0=torch.nn.Linear(3, 4), act0=torch.nn.LeakyReLU(),
                                           fc1=torch.nn.Linear(4, 2)))
    cfg = IntactConfig(lambda_intdrift=1.0, lambda_feat=0.0, lambda_var=1.0, lambda_align=0.0)
    regs = [IntactRegularizer(c, head, ["fc0", "fc1"], feature="fc0")
            for c in (cfg, IntactConfig(**{**cfg.__dict__, "protected_layers": "cls"}))]
    for reg in regs:
        reg.hypercubes = {"fc0": Hypercube(-torch.ones(3), torch.ones(3)),
                          "fc1": Hypercube(-torch.ones(4), torch.ones(4))}
        reg.begin_task(1)
    with torch.no_grad():
        head.fc1.weight.add_(1.0)                                       # only the second layer moved
    head(torch.randn(6, 3))
    paper, ref = (reg.penalty() for reg in regs)
    assert float(paper["intdrift"].detach()) > 0 and float(ref["intdrift"].detach()) == 0.0
    assert float(ref["var"].detach()) < float(paper["var"].detach())                      # L_Var on fc0's input only


def test_test_set_hypercube_source_warns_and_reaches_the_hypercubes_only(tiny_bench, tmp_path, monkeypatch):
    """``hypercube_source=test_seen`` gives the test sets to the hypercubes' pass alone: InfLoRA's own end of task
    (its DualGPM subspace) still reads the training split."""
    from intact.data import open_benchmark
    from intact.methods.impl.inflora import InfLoRA
    from intact.methods.shared.penalties import HypercubeRecorder
    from intact.train import train_task

    seen = {"subspace": [], "hypercubes": []}
    covariances, recorder_end = InfLoRA.input_covariances, HypercubeRecorder.end_task
    monkeypatch.setattr(InfLoRA, "input_covariances",
                        lambda self, data: seen["subspace"].append(len(data)) or covariances(self, data))
    monkeypatch.setattr(HypercubeRecorder, "end_task",
                        lambda self, m, t, data: seen["hypercubes"].append(len(data)) or recorder_end(self, m, t, data))
    run = resolve_run(tiny_bench["config"], "digits", "inflora+intact@hypercube_source=test_seen", 0)
    with pytest.warns(UserWarning, match="TEST sets"):
        rec = train_task(run, 0, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                         out_dir=tmp_path / "task0", threads=1, progress=False)
    assert rec["config"]["intact"]["hypercube_source"] == "test_seen"
    bench = open_benchmark(tiny_bench["manifest"], run.benchmark)
    assert len(bench.train_set(0)) != len(bench.eval_set(0))
    assert seen["hypercubes"] == [len(bench.eval_set(0))]
    assert seen["subspace"] and set(seen["subspace"]) == {len(bench.train_set(0))}


def test_only_intacts_penalty_counts_ce_twice_and_a_method_without_it_builds_no_regularizer():
    """The reference preset's ``double_ce`` lives in InTAct's penalty: the loss differs from ``double_ce=false``'s
    by one CE exactly; plain ``coda_p`` keeps only the books (a recorder, no ``IntactRegularizer``, no terms)."""
    from intact.methods import create_method
    from intact.methods.shared.penalties import HypercubeRecorder, IntactPenalty
    from intact.models.backbone import FrozenViT, create_vit
    from intact.regularizers.regularizer import IntactRegularizer

    torch.manual_seed(0)
    backbone = FrozenViT(create_vit("vit_digits_p8"), (0.5,), (0.5,))
    x, y = torch.rand(4, 1, 32, 32), torch.tensor([0, 1, 2, 3])
    losses, methods = {}, {}
    for name in ("coda_p+intact@preset=reference", "coda_p+intact@preset=reference,double_ce=false", "coda_p"):
        torch.manual_seed(1)
        methods[name] = method = create_method(resolve_run(tiny_config(), "digits", name, 0), backbone, 10, 3)
        enter_task(method, 0, None)
        losses[name] = batch_loss(method, x, y)
    (doubled, terms), (single, same) = losses["coda_p+intact@preset=reference"], \
        losses["coda_p+intact@preset=reference,double_ce=false"]
    assert torch.equal(terms["ce"], same["ce"]) and "var" in terms
    torch.testing.assert_close(doubled - single, terms["ce"], rtol=0, atol=1e-6)
    plain = methods["coda_p"]
    assert type(plain.intact) is HypercubeRecorder and not isinstance(plain.intact.tracker, IntactRegularizer)
    assert isinstance(methods["coda_p+intact@preset=reference"].intact, IntactPenalty)
    assert not {"var", "intdrift", "feat", "align"} & set(losses["coda_p"][1])
