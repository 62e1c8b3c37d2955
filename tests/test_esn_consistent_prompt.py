"""ESN and CPrompt (issue 21): each one's defining computations against a literal reading of its official code,
+intact refused with the reason, stage / domain isolation on the tiny benchmark, a mid-task kill resumed bit
for bit, and both through the Snakemake workflow (a deleted task redone to the same R)."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from intact.config import ConfigError, resolve_run
from intact.io import load_tensors, read_json
from intact.models.backbone import FrozenViT, create_vit
from intact.methods.impl.consistent_prompt import ccl_loss, key_logits
from intact.models.esn import ClassAttentionBlock, choose_temperature, free_energy, prompted_tokens, vote
from intact.restore import build_method
from intact.train import Preempted

from conftest import CPU_CLAIM, snakemake, tiny_config, train_on_tiny, train_one

TASKS = 3


# ---- shared: prompt tokens inserted into the frozen ViT -----------------------------------------------

def test_prompt_tokens_go_in_after_cls_and_after_earlier_ones_before_the_final_norm():
    torch.manual_seed(0)
    vit = create_vit("vit_digits_p8")
    bb = FrozenViT(vit, (0.5,), (0.5,))
    x = torch.rand(2, 1, 32, 32)
    p0, p2 = torch.randn(3, bb.embed_dim), torch.randn(2, 2, bb.embed_dim)
    h = bb.tokens(x)                                        # position embedding already added: prompts get none
    h = torch.cat((h[:, :1], p0.expand(2, -1, -1), h[:, 1:]), 1)
    h = vit.blocks[1](vit.blocks[0](h))
    h = torch.cat((h[:, :4], p2, h[:, 4:]), 1)               # CPrompt's second set: after [CLS] + the first set
    manual = vit.blocks[3](vit.blocks[2](h))                 # returnbeforepool: no final LayerNorm
    torch.testing.assert_close(prompted_tokens(bb, x, {0: p0, 2: p2}), manual, rtol=0, atol=0)
    torch.testing.assert_close(vit.norm(prompted_tokens(bb, x, {}))[:, 0], bb.query(x), rtol=0, atol=0)


# ---- ESN ----------------------------------------------------------------------------------------------

def test_class_attention_block_is_convits_with_the_query_from_the_task_token_only():
    torch.manual_seed(0)
    D, H, B, N = 8, 2, 3, 5
    blk = ClassAttentionBlock(D, H, 0.5)
    blk.reset(torch.Generator().manual_seed(1))
    assert blk.mlp[0].out_features == 4 and blk.norm1.eps == 1e-5
    token, tokens = torch.randn(1, 1, D), torch.randn(B, N, D)
    # models/convit.py Block + ClassAttention, written out per head
    x = torch.cat((token.expand(B, -1, -1), tokens), 1)
    xx = blk.norm1(x)
    out = []
    for h in range(H):
        sl = slice(h * D // H, (h + 1) * D // H)
        q = blk.q(xx[:, 0])[:, sl] * (D // H) ** -0.5
        a = torch.einsum("bd,bnd->bn", q, blk.k(xx)[:, :, sl]).softmax(-1)
        out.append(torch.einsum("bn,bnd->bd", a, blk.v(xx)[:, :, sl]))
    cls = blk.proj(torch.cat(out, 1)) + token[:, 0]
    expected = cls + blk.mlp[2](F.gelu(blk.mlp[0](blk.norm2(cls))))
    torch.testing.assert_close(blk(token, tokens), expected)


def test_free_energy_is_the_codes_soft_minimum_of_the_logits():
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, -5.0, 4.0]])
    torch.testing.assert_close(free_energy(logits, 1.0), -torch.log(torch.exp(-logits).sum(1)))
    # beta -> infinity: the minimum logit
    torch.testing.assert_close(free_energy(logits, 200.0), logits.min(1).values, atol=1e-2, rtol=0)


def test_the_kept_temperature_separates_the_stage_best_and_the_first_wins_a_tie():
    # image A: stage 0 has one high logit, stage 1 many medium ones; at low T (a max) stage 0 wins,
    # at high T (a sum) stage 1 wins. Stage 1's own images should pick stage 1: the high temperature.
    a = torch.tensor([[[3.0, 0.0, 0.0, 0.0], [2.5, 2.5, 2.5, 2.5]]])
    logits = a.repeat(4, 1, 1)
    assert choose_temperature(logits, 1, (0.01, 0.1, 10.0)) == 10.0
    assert choose_temperature(logits, 0, (0.01, 0.1, 10.0)) == 0.01          # 0.01 and 0.1 tie: the first
    # the vote: distinct temperatures vote once each (0.01 twice counts once); a tie goes to the lower stage
    assert vote(logits, [0.01, 0.01, 10.0]).tolist() == [0, 0, 0, 0]
    assert vote(logits, [10.0, 20.0, 0.01]).tolist() == [1, 1, 1, 1]


def test_esn_plus_intact_and_consistent_prompt_plus_intact_are_refused_with_the_reason(tiny_bench):
    for method in ("esn", "consistent_prompt"):
        with pytest.raises(ConfigError, match="does not accept '\\+intact': it shares no head between domains"):
            resolve_run(tiny_bench["config"], "digits", f"{method}+intact", 0)


def test_an_mlp_ratio_that_leaves_no_hidden_unit_is_refused_at_validation():
    """int(width x mlp_ratio) hidden units: 0 passed validation and the job's guard failed on the empty weights."""
    from intact.config import validate_config
    from intact.testing import tiny_config

    cfg = tiny_config(methods=["esn"])
    cfg["methods"]["esn"] = {"mlp_ratio": 0.01}
    with pytest.raises(ConfigError, match=r"'methods.esn.mlp_ratio' = 0.01: gives the class-attention MLP 0 hidden "
                                          r"units at the backbone's width \d+: at least 1"):
        validate_config(cfg, check_files=False)


# ---- CPrompt ------------------------------------------------------------------------------------------

def test_ccl_pushes_old_classifiers_only_where_the_new_one_is_not_confident():
    old = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.4, 0.0]], requires_grad=True)
    current = torch.tensor([[5.0, 0.0, 0.0], [0.1, 0.0, 0.0]])        # image 0: confident (5 > 2 + 0.1); image 1: not
    loss = ccl_loss(old, current, margin=0.1, tau=1.5)
    p, flat = F.softmax(old.detach(), 1), F.softmax(old.detach() / 1.5, 1)
    manual = -(torch.stack((p[0], flat[1])) * F.log_softmax(old.detach(), 1)).sum(1).mean()
    torch.testing.assert_close(loss, manual)
    loss.backward()
    assert torch.allclose(old.grad[0], torch.zeros(3), atol=1e-7)    # T = 1: the target is itself, no gradient
    assert old.grad[1].abs().sum() > 0 and old.grad[1, 0] > 0            # T = tau: the top logit is pulled down


def test_keys_of_earlier_domains_are_detached_and_cosines_are_scale_free():
    keys = torch.randn(6, 4, requires_grad=True)
    q = torch.randn(2, 4)
    cos = key_logits(q, keys, 4, 2)                                     # domains 0, 1 of 2 classes; training domain 1
    assert cos.shape == (2, 4)
    cos.sum().backward()
    assert keys.grad[:2].abs().sum() == 0 and keys.grad[2:4].abs().sum() > 0 and keys.grad[4:].abs().sum() == 0
    torch.testing.assert_close(key_logits(3 * q, 5 * keys.detach(), 4, None), cos.detach())


# ---- on the tiny benchmark ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tiny_bench, tmp_path_factory):
    root = tmp_path_factory.mktemp("esn_consistent_prompt")
    out = {}
    for method in ("esn", "esn@methods.esn.prompt_training=first_task", "consistent_prompt"):
        run = resolve_run(tiny_bench["config"], "digits", method, 0)
        out[method] = {"run": run, "folder": root / method, "R": train_on_tiny(tiny_bench, run, root / method, TASKS)}
    return out


def _same(a: dict, b: dict, prefix: str) -> bool:
    keys = [k for k in a if k.startswith(prefix)]
    return bool(keys) and all(torch.equal(a[k], b[k]) for k in keys)


@pytest.mark.parametrize("method", ["esn", "esn@methods.esn.prompt_training=first_task"])
def test_esn_isolates_the_stages_and_keeps_a_temperature_per_stage(runs, method):
    z = runs[method]
    assert torch.isfinite(z["R"]).all() and (z["R"] >= 0).all()
    s0, s2 = (load_tensors(z["folder"] / f"task{t}/state.safetensors") for t in (0, 2))
    for part in ("blocks.0.", "heads.0.", "tokens.0"):                  # stage 0 untouched by later stages
        assert _same(s0, s2, part), part
    assert not _same(s0, s2, "blocks.1.")                               # stage 1 trained after task 0
    # the released code trains the shared prompt at every stage; its freezep flag's intent: the first only
    assert torch.equal(s0["prompt"], s2["prompt"]) == method.endswith("first_task")
    temps = read_json(z["folder"] / "task2/train.json")["esn"]["temperatures"]
    assert len(temps) == 3 and temps[0] == pytest.approx(0.001) and s2["temperature"].tolist() == pytest.approx(temps)
    epoch = read_json(z["folder"] / "task1/train.json")["epochs"][0]
    assert epoch["energy"] > 0 and "intdrift" not in epoch
    # one stage trains: token + class-attention block + classifier + (every_task) the prompt
    D, C = 64, 10
    block = 4 * (D * D + D) + 2 * 2 * D + (D * 32 + 32) + (32 * D + D)
    prompt = 10 * D if method == "esn" else 0
    assert read_json(z["folder"] / "task1/train.json")["trainable_parameters"] == D + block + D * C + C + prompt


def test_consistent_prompt_keeps_earlier_domains_and_classifies_through_the_nearest_key(runs, tiny_bench):
    z = runs["consistent_prompt"]
    R = z["R"]
    assert torch.isfinite(R).all() and R[0, 0] > 20, R
    s0, s1, s2 = (load_tensors(z["folder"] / f"task{t}/state.safetensors") for t in range(TASKS))
    assert _same(s0, s2, "prompts.0") and _same(s0, s2, "heads.0.")
    assert torch.equal(s0["keys"][:10], s2["keys"][:10]) and not torch.equal(s1["keys"][10:20], s0["keys"][10:20])
    epoch = read_json(z["folder"] / "task1/train.json")["epochs"][0]
    assert {"ce", "aux_ce", "ccl", "key"} <= set(epoch) and epoch["ccl"] > 0
    # the test path, by hand: the nearest key's domain gives the prompts, the best class over all heads wins
    bench, m, _ = build_method(z["run"], tiny_bench["manifest"], tiny_bench["weights"], torch.device("cpu"),
                              state=z["folder"] / "task2/state.safetensors", state_task=2)
    m.eval()
    x = torch.stack([bench.eval_set(1)[i][0] for i in range(16)])
    with torch.no_grad():
        q = prompted_tokens(m.backbone, x, {})[:, 0]
        domain = (F.normalize(q, dim=1) @ F.normalize(s2["keys"][:30], dim=1).T).argmax(1) // 10
        logits = []
        for i, d in enumerate(domain.tolist()):
            P = s2[f"prompts.{d}"]
            zf = prompted_tokens(m.backbone, x[i:i + 1], {0: P[0], m.cfg.second_block: P[1]})[:, 0]
            logits.append(torch.stack([zf @ s2[f"heads.{k}.fc0.weight"].T + s2[f"heads.{k}.fc0.bias"]
                                       for k in range(3)]).max(0).values[0])
        torch.testing.assert_close(m.predict(x), torch.stack(logits), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["esn", "consistent_prompt"])
def test_a_killed_task_resumes_and_the_rerun_gives_the_same_R_bit_for_bit(runs, tiny_bench, tmp_path, method):
    """Task 1 killed after 2 steps (its checkpoint kept), resumed, then task 2 on top: the same states and R."""
    z = runs[method]
    work = tmp_path / method
    shutil.copytree(z["folder"] / "task0", work / "task0")
    with pytest.raises(Preempted):
        train_one(tiny_bench, z["run"], work / "task1", 1, work / "task0", max_steps=2)
    assert (work / "task1/checkpoint.pt").exists() and not (work / "task1/state.safetensors").exists()
    from intact.evaluate import evaluate_task

    R = torch.zeros(TASKS, TASKS)
    R[:, 0] = z["R"][:, 0]
    for t in (1, 2):
        record = train_one(tiny_bench, z["run"], work / f"task{t}", t, work / f"task{t - 1}")
        assert record["resumed_from"] == ({"epoch": 0, "step": 2} if t == 1 else None)
        a = load_tensors(z["folder"] / f"task{t}/state.safetensors")
        b = load_tensors(work / f"task{t}/state.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        rec = evaluate_task(z["run"], t, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                            state=work / f"task{t}/state.safetensors", out_path=work / f"task{t}/eval.json", threads=1)
        R[:, t] = torch.tensor(rec["accuracy"])
    assert torch.equal(R, z["R"])


@pytest.mark.slow
def test_esn_and_consistent_prompt_run_through_the_workflow_and_a_deleted_task_is_redone_to_the_same_R(prepared_digits,
                                                                                                        tmp_path):
    cfg = tiny_config(methods=["esn", "consistent_prompt"])
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise"]      # two domains (the session's prepared ones)
    cfg["tracking"]["enabled"] = False
    cfg["studies"] = {}
    prepared_digits(cfg, tmp_path)
    snakemake(tmp_path)
    runs = {m: tmp_path / "results/runs/digits" / m / "seed0" for m in ("esn", "consistent_prompt")}
    before = {m: (r / "R.csv").read_bytes() for m, r in runs.items()}
    for m, r in runs.items():
        assert read_json(r / "metrics.json")
        assert "`" + m + "`" in (tmp_path / "results/tables/digits/default_run.md").read_text()
        for f in (r / "task1").iterdir():
            f.unlink()
    snakemake(tmp_path)
    assert {m: (r / "R.csv").read_bytes() for m, r in runs.items()} == before


@CPU_CLAIM
def test_consistent_prompt_with_its_query_cache_equals_the_live_run_bit_for_bit(runs, tiny_bench, tmp_path):
    """The unprompted pre-norm [CLS] computed once per task = computed every step (CPU, fp32)."""
    z = runs["consistent_prompt"]
    assert read_json(z["folder"] / "task1/train.json")["feature_cache"]["query"] == "computed at the start of the task"
    live = resolve_run(tiny_bench["config"], "digits", "consistent_prompt@optim.feature_cache=false", 0)
    for t in range(2):
        train_one(tiny_bench, live, tmp_path / f"task{t}", t, tmp_path / f"task{t - 1}" if t else None)
    assert read_json(tmp_path / "task1/train.json")["feature_cache"]["used"] is False
    a, b = load_tensors(z["folder"] / "task1/state.safetensors"), load_tensors(tmp_path / "task1/state.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
