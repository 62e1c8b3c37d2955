"""InfLoRA: the LoRA path equals merged K/V weights, DualGPM keeps earlier tasks' input subspace, and the
method (with and without +intact) trains, resumes and evaluates on the tiny benchmark."""

from __future__ import annotations

import copy

import pytest
import torch

from intact.config import resolve_run
from intact.io import load_tensors, read_json
from intact.models.backbone import FrozenViT, create_vit
from intact.methods.impl.inflora import DualGPM, KVLoRA, down_projection, lora_forward, threshold

from conftest import train_on_tiny, train_one

TASKS = 3


def _inputs(basis: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    """``n`` inputs spanning ``basis``'s columns, with decaying energy per direction."""
    k = basis.shape[1]
    return (torch.randn(n, k, generator=g,
                        dtype=torch.float64) * torch.linspace(3, 1, k, dtype=torch.float64)) @ basis.T


def _cov(x: torch.Tensor) -> torch.Tensor:
    return x.T @ x / len(x)


def _orthonormal(d: int, k: int, g: torch.Generator) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))[0]


def test_threshold_rises_linearly_from_lamb_to_lame():
    assert threshold(0, 10, 0.98, 1.0) == pytest.approx(0.98)
    assert threshold(5, 10, 0.98, 1.0) == pytest.approx(0.99)
    assert threshold(9, 10, 0.95, 1.0) == pytest.approx(0.995)


@pytest.mark.parametrize("old_dims", [4, 12])   # 12 of 16: the basis is stored as its complement ("retain")
def test_new_lora_update_has_no_component_in_earlier_tasks_input_subspace(old_dims):
    g = torch.Generator().manual_seed(0)
    D, rank = 16, 3
    old = _orthonormal(D, old_dims, g)
    gpm = DualGPM(depth=1, dim=D)
    info = gpm.update([_cov(_inputs(old, 500, g))], thr=0.999)
    prot = gpm.protected_basis(0)
    k = prot.shape[1]
    assert info[0]["protected"] == k and old_dims / 2 < k <= old_dims   # the task's main input directions ...
    assert info[0]["kind"] == ("retain" if k > D / 2 else "remove")
    assert (prot - old @ (old.T @ prot)).abs().max() < 1e-5             # ... all inside its input span
    # task 1 sees inputs everywhere (old directions included): its A must still avoid the protected subspace
    new_cov = _cov(_inputs(_orthonormal(D, D, g), 2000, g))
    A = down_projection(new_cov, gpm.free_projector(0), rank, 1.0)
    assert (A @ prot).abs().max() < 1e-6
    B = torch.randn(D, rank, generator=g, dtype=torch.float64)            # any trained B
    x_old = _inputs(prot, 50, g)
    assert (x_old @ (B @ A).T).abs().max() < 1e-5                          # no change of K / V on old inputs
    # the update is not trivially zero: it acts on the free space
    assert (_inputs(_orthonormal(D, D, g), 50, g) @ (B @ A).T).abs().max() > 1e-2
    # without the projection, the top directions of the same covariance do reach the protected subspace
    plain = torch.linalg.svd(new_cov)[0][:, :rank].T
    assert (plain @ prot).abs().max() > 1e-2


def test_dualgpm_grows_by_the_energy_the_threshold_asks_for():
    g = torch.Generator().manual_seed(1)
    D = 12
    U = _orthonormal(D, D, g)
    energy = torch.tensor([8.0, 4.0, 2.0, 1.0] + [0.0] * (D - 4), dtype=torch.float64)
    cov = U @ torch.diag(energy) @ U.T
    ratio = energy ** 2 / (energy ** 2).sum()        # the code's criterion: squared singular values of C
    gpm = DualGPM(1, D)
    thr = float(ratio[:2].sum()) + 1e-6             # just above two directions' share: r = 2 (cumsum < thr)
    gpm.update([cov], thr)
    assert int(gpm.dims[0]) == 2
    assert torch.allclose(gpm.protected_basis(0) @ gpm.protected_basis(0).T, U[:, :2] @ U[:, :2].T, atol=1e-6)
    # later tasks add directions of the part outside the subspace until the kept share reaches the threshold
    gpm.update([cov], float(ratio[:3].sum()) - 1e-6)
    assert int(gpm.dims[0]) == 3


def test_dualgpm_stored_as_its_complement_still_grows_with_a_later_tasks_new_directions():
    """Past half the space the basis is the free space ("retain"). A later task then shrinks it by the new directions
    its inputs bring (the official code's retain branch, which no other test reached); a task inside the protected
    span changes nothing."""
    g = torch.Generator().manual_seed(2)
    D = 16
    U = _orthonormal(D, D, g)
    old, new, rest = U[:, :10], U[:, 10:12], U[:, 12:]
    gpm = DualGPM(1, D)
    assert gpm.update([_cov(_inputs(old, 500, g))], thr=0.999)[0]["kind"] == "retain"
    before = gpm.protected_basis(0)
    assert (before - old @ (old.T @ before)).abs().max() < 1e-6 and before.shape[1] > D / 2
    info = gpm.update([_cov(_inputs(torch.cat([old, new], 1), 2000, g))], thr=0.999)
    prot = gpm.protected_basis(0)
    assert info[0] == {"protected": prot.shape[1], "kind": "retain"} and prot.shape[1] == 12
    assert torch.allclose(prot.T @ prot, torch.eye(12, dtype=prot.dtype), atol=1e-10)
    span = torch.cat([old, new], 1)                           # the old directions stay protected, the new join them
    assert (span - prot @ (prot.T @ span)).abs().max() < 1e-6
    assert torch.allclose(gpm.free_projector(0), rest @ rest.T, atol=1e-6)  # and the rest stays free
    basis = gpm.basis.clone()
    assert gpm.update([_cov(_inputs(old, 500, g))], thr=0.999)[0]["protected"] == 12
    assert torch.equal(gpm.basis, basis)


def test_a_whole_protected_space_leaves_no_free_direction():
    """Once the protected subspace is the whole space (a "retain" basis of no column), nothing is free: the next
    task's A is zero. It read as "no task yet": every direction free, A the covariance's top, most protected,
    directions."""
    g = torch.Generator().manual_seed(3)
    D = 8
    gpm = DualGPM(1, D)
    for _ in range(4):
        info = gpm.update([_cov(_inputs(_orthonormal(D, D, g), 400, g))], thr=0.9999)
    assert info[0] == {"protected": D, "kind": "retain"} and int(gpm.dims[0]) == 0
    assert torch.equal(gpm.free_projector(0), torch.zeros(D, D, dtype=torch.float64))
    assert torch.equal(gpm.protected_basis(0), torch.eye(D, dtype=torch.float64))
    cov = _cov(_inputs(_orthonormal(D, D, g), 400, g))
    a = down_projection(cov, gpm.free_projector(0), 2, 3 ** -0.5)
    assert torch.equal(a, torch.zeros(2, D, dtype=torch.float64))
    assert torch.equal(DualGPM(1, D).free_projector(0), torch.eye(D, dtype=torch.float64))   # before any task


def test_lora_forward_equals_the_backbone_with_merged_key_and_value_weights():
    torch.manual_seed(0)
    vit = create_vit("vit_digits_p8")
    bb = FrozenViT(vit, (0.5,), (0.5,))
    x = torch.rand(3, 1, 32, 32)
    lora = KVLoRA(bb.depth, bb.embed_dim, 4, 3)
    assert torch.equal(lora_forward(bb, x, lora), bb.query(x))          # B = 0: the backbone itself
    with torch.no_grad():
        lora.A.normal_()
        for b in lora.B:
            b.normal_(std=0.1)
    lora.begin_task(1)                                                  # tasks 0 and 1 summed, task 2 not
    merged = copy.deepcopy(vit)
    D = bb.embed_dim
    with torch.no_grad():
        for i, blk in enumerate(merged.blocks):
            W = lora.update(0, i) + lora.update(1, i)
            blk.attn.qkv.weight[D:2 * D] += W[0]
            blk.attn.qkv.weight[2 * D:] += W[1]
    assert torch.allclose(lora_forward(bb, x, lora), FrozenViT(merged, (0.5,), (0.5,)).query(x), atol=1e-4)
    assert [b.requires_grad for b in lora.B] == [False, True, False]


# ---- end to end on the tiny benchmark ---------------------------------------------------------------

@pytest.mark.parametrize("method", ["inflora", "inflora+intact"])
def test_inflora_trains_three_tasks_and_keeps_later_updates_out_of_earlier_subspaces(tiny_bench, tmp_path, method):
    run = resolve_run(tiny_bench["config"], "digits", method, 0)
    R = train_on_tiny(tiny_bench, run, tmp_path, TASKS)
    assert (R.diag() > 20).all(), R
    record = read_json(tmp_path / "task1/train.json")
    assert record["dualgpm"]["blocks"] and record["trainable_parameters"] > 0
    if "+intact" in method:
        assert "intdrift" in record["epochs"][0] and "feat" in record["epochs"][0]
        assert record["feature_cache"].get("teacher") == "computed at the start of the task"
    # task 1's A lies outside the subspace DualGPM protected after task 0 (in every block)
    s0, s1 = load_tensors(tmp_path / "task0/state.safetensors"), load_tensors(tmp_path / "task1/state.safetensors")
    gpm = DualGPM(*s0["gpm.basis"].shape[:2])
    gpm.load_state_dict({k[4:]: v for k, v in s0.items() if k.startswith("gpm.")})
    for b in range(gpm.basis.shape[0]):
        prot = gpm.protected_basis(b)
        A1 = s1["pool.A"][1, b].to(torch.float64)                        # (2, r, D)
        assert (A1 @ prot).abs().max() < 1e-5 * A1.abs().max()
        assert torch.equal(s1["pool.B.0"], s0["pool.B.0"])              # task 0's B frozen


def test_inflora_resumes_mid_task_bit_identically(tiny_bench, tmp_path):
    run = resolve_run(tiny_bench["config"], "digits", "inflora+intact", 0)
    for out in ("full", "cut"):
        train_one(tiny_bench, run, tmp_path / out / "task0", 0)
    train_one(tiny_bench, run, tmp_path / "full/task1", 1, tmp_path / "full/task0")
    with pytest.raises(SystemExit):
        train_one(tiny_bench, run, tmp_path / "cut/task1", 1, tmp_path / "cut/task0", max_steps=2)
    record = train_one(tiny_bench, run, tmp_path / "cut/task1", 1, tmp_path / "cut/task0")
    assert record["resumed_from"] == {"epoch": 0, "step": 2}
    a = load_tensors(tmp_path / "full/task1/state.safetensors")
    b = load_tensors(tmp_path / "cut/task1/state.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_inflora_intact_with_the_teacher_cache_equals_the_live_run_bit_for_bit(tiny_bench, tmp_path):
    from test_cache import _run as run_with_cache, _train_eval

    cfg, manifest, w = tiny_bench["config"], tiny_bench["manifest"], tiny_bench["weights"]
    R0, s0, d0 = _train_eval(run_with_cache(cfg, "digits", "inflora+intact", False), manifest, w, tmp_path / "live", 2,
                             None)
    R1, s1, d1 = _train_eval(run_with_cache(cfg, "digits", "inflora+intact", True), manifest, w, tmp_path / "cached",
                             2, None)
    assert R0 == R1
    assert s0.keys() == s1.keys() and all(torch.equal(s0[k], s1[k]) for k in s0)
    a, b = read_json(d0 / "task1/train.json"), read_json(d1 / "task1/train.json")
    assert [e["feat"] for e in a["epochs"]] == [e["feat"] for e in b["epochs"]]
    assert a["hypercube"] == b["hypercube"] and a["certificate"] == b["certificate"]
    assert not a["feature_cache"]["used"] and b["feature_cache"]["used"]
    # no query, so none cached; the teacher (the previous task's frozen model) is
    assert "query" not in b["feature_cache"] and b["feature_cache"]["teacher"] == "computed at the start of the task"


def test_bench_counts_the_lora_passes():
    from conftest import tiny_config
    from intact.speed import bench_row

    cfg = tiny_config(methods=["inflora", "inflora+intact"])
    passes = [bench_row(cfg, "digits", m, cache, model="vit_rgb_p8", batch=8, repeats=2, device=torch.device("cpu"),
                        amp=False, classes=10, tasks=3)["passes_per_step"]
              for m in ("inflora", "inflora+intact") for cache in (False, True)]
    assert passes == [1, 1, 2, 1]     # the teacher's pass is cached; there is no query pass to cache
