"""C-Prompt and KA-Prompt: their defining behaviour, and tiny end-to-end runs with and without +intact."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from intact.config import resolve_run
from intact.data.loader import eval_batches
from intact.io import load_tensors, read_json
from intact.methods.shared.base import enter_task, trainable_state
from intact.models.backbone import FrozenViT, create_vit
from intact.methods.impl.compositional_prompt import AdaptiveEma, CompositionalPool, qkv_prefix
from intact.methods.impl.ka_prompt import greedy_slots
from intact.models.shared_prompt import split_prompt
from intact.restore import build_method
from intact.train import Preempted

from conftest import CPU_CLAIM, train_on_tiny, train_one

METHODS = ["compositional_prompt", "compositional_prompt+intact", "ka_prompt", "ka_prompt+intact"]
TASKS = 3


def _backbone(seed: int = 0) -> FrozenViT:
    torch.manual_seed(seed)
    vit = create_vit("vit_digits_p8")
    with torch.no_grad():  # non-zero qkv biases, so that "+ b" is tested too
        for blk in vit.blocks:
            blk.attn.qkv.bias.normal_()
    return FrozenViT(vit, (0.5,), (0.5,))


# ---- the prompts through the frozen qkv -------------------------------------------------------------

def _official_block(block, x: torch.Tensor, prompt: torch.Tensor) -> torch.Tensor:
    """C-Prompt's ``forward_block`` / ``forward_attn``, written out: the prompt's halves are inserted into
    the (LayerNormed) token sequence after [CLS] and the whole sequence goes through qkv; K is read from
    the first-half sequence, V from the second-half one, Q from the tokens alone."""
    attn = block.attn
    h = block.norm1(x)
    B, N, C = h.shape
    H, hd = attn.num_heads, attn.head_dim
    half = prompt.shape[1] // 2

    def heads(t):
        return attn.qkv(t).reshape(B, t.shape[1], 3, H, hd).permute(2, 0, 3, 1, 4)

    q = heads(h)[0]
    k = heads(torch.cat([h[:, :1], prompt[:, :half], h[:, 1:]], 1))[1]
    v = heads(torch.cat([h[:, :1], prompt[:, half:], h[:, 1:]], 1))[2]
    a = (q @ k.transpose(-2, -1) * hd ** -0.5).softmax(-1) @ v
    x = x + attn.proj(a.transpose(1, 2).reshape(B, N, C))
    return x + block.mlp(block.norm2(x))


def test_qkv_projected_prompt_is_the_prefix_of_the_official_insertion():
    bb = _backbone()
    g = torch.Generator().manual_seed(1)
    x = torch.rand(3, 1, 32, 32, generator=g)
    raw = {l: torch.rand(3, 4, 64, generator=g) * 2 - 1 for l in (0, 1, 2, 3)}
    # qkv_prefix is W p + b of the K rows (first half) and of the V rows (second half)
    attn = bb.vit.blocks[2].attn
    pk, pv = qkv_prefix(attn, raw[2])
    W, b = attn.qkv.weight, attn.qkv.bias
    torch.testing.assert_close(pk, raw[2][:, :2] @ W[64:128].T + b[64:128])
    torch.testing.assert_close(pv, raw[2][:, 2:] @ W[128:].T + b[128:])
    # the whole backbone with the projected prefix = the official insertion, block by block
    ours = bb(x, {l: qkv_prefix(bb.vit.blocks[l].attn, p) for l, p in raw.items()})
    h = bb.tokens(x)
    for i, blk in enumerate(bb.vit.blocks):
        h = _official_block(blk, h, raw[i]) if i in raw else blk(h)
    torch.testing.assert_close(ours, bb.vit.norm(h)[:, 0], rtol=1e-5, atol=1e-5)
    # ... and not the raw prompts used as keys / values directly
    unprojected = bb(x, {l: split_prompt(p) for l, p in raw.items()})
    assert not torch.allclose(unprojected, ours, atol=1e-3)


def test_query_tokens_read_token1_and_the_patch_mean():
    bb = _backbone()
    x = torch.rand(2, 1, 32, 32)
    h = bb.vit.norm(bb.vit.blocks(bb.tokens(x)))
    torch.testing.assert_close(bb.query(x), h[:, 0])
    torch.testing.assert_close(bb.query(x, "token1"), h[:, 1])
    torch.testing.assert_close(bb.query(x, "patch_mean"), h[:, 1:].mean(1))


def test_selection_is_within_the_task_slice_in_training_and_over_the_pool_at_test():
    pool = CompositionalPool(8, num_tasks=3, per_task=3, length=2, top_n=2, general_length=2, general_layers=(0,),
                             expert_layers=(1,))
    pool.begin_task(0, torch.Generator().manual_seed(0))
    pool.begin_task(1, torch.Generator().manual_seed(1))
    q = torch.randn(64, 8, generator=torch.Generator().manual_seed(2))
    pool.train()
    idx, dist = pool.select(q)
    assert ((idx >= 3) & (idx < 6)).all()
    cos = F.normalize(q, dim=1) @ F.normalize(pool.keys, dim=1).T
    torch.testing.assert_close(dist, 1 - cos.gather(1, idx))
    raw, aux = pool(q)
    torch.testing.assert_close(raw[1], pool.prompts["1"][idx].mean(1))          # the N prompts averaged
    torch.testing.assert_close(aux, 0.5 * dist.sum(1).mean())
    pool.eval()
    assert pool.select(q)[0].tolist() == cos.topk(2, dim=1).indices.tolist()    # whole pool, untrained slice 2 too
    pool.test_pool = "seen"
    assert (pool.select(q)[0] < 6).all()


# ---- the adaptive EMA head ------------------------------------------------------------------------

def test_ema_gamma_follows_its_formula():
    h = 3.0
    head = nn.Linear(4, 2)
    general = nn.ParameterDict({"0": nn.Parameter(torch.zeros(2, 4)), "1": nn.Parameter(torch.zeros(2, 4))})
    ema = AdaptiveEma(head, general, h=h)
    ema.start(general)
    g = torch.Generator().manual_seed(0)
    changes, shadow = [], None
    for step in range(5):
        before = torch.cat([p.detach().clone().flatten() for p in general.values()])
        with torch.no_grad():
            for p in general.values():
                p.add_(torch.randn(p.shape, generator=g) * (step + 1))
            head.weight.add_(torch.randn(2, 4, generator=g))
        d = float((torch.cat([p.detach().flatten() for p in general.values()]) - before).norm())
        changes.append(d)
        ema.step(head, general)
        gamma = 1 - math.exp(d / (sum(changes) / len(changes)) - h)
        assert float(ema.gamma) == pytest.approx(gamma, rel=1e-6)  # d from float32 prompts
        w = head.weight.detach().double()
        shadow = w if shadow is None else gamma * shadow + (1 - gamma) * w   # the first update copies
        torch.testing.assert_close(ema.shadow()["weight"].double(), shadow, rtol=1e-6, atol=1e-6)
    z = torch.randn(3, 4)
    torch.testing.assert_close(ema(head, z), z @ ema.shadow()["weight"].T + ema.shadow()["bias"])


def test_an_ema_span_under_one_step_is_refused():
    """ema_span sets h = 1 + ln(span x mean steps): under one step, h < 1 and the EMA diverged (NaN) before."""
    from intact.methods.compositional_prompt import ema_h, ema_span

    assert ema_h(ema_span(6.5, [30, 40]), [30, 40]) == pytest.approx(6.5) and ema_h(1 / 35, [30, 40]) == 1.0
    with pytest.raises(ValueError, match=r"ema_span = 0.01 tasks is under one step of this run's tasks \(35 steps on "
                                         r"average\): at least 0.0286"):
        ema_h(0.01, [30, 40])


@pytest.mark.parametrize("base", ["compositional_prompt", "ka_prompt"])
@pytest.mark.parametrize("settings, key, fragment", [
    # each accepted by validation before 2026-11-30: the job then raised (top_n), crashed (no general prompt: a
    # TypeError) or trained an EMA head of NaNs (an expert block over every general block)
    ({"per_task": 1}, "top_n", "above per_task = 1"),
    ({"top_n": 4}, "top_n", "above per_task = 3"),
    ({"expert_first": 1}, "expert_first", "blocks [1] would get both the general and an expert prompt"),
    ({"expert_first": 0}, "expert_first", "blocks [0, 1] would get both"),
    ({"general_layers": []}, "general_layers", "is empty, but the adaptive EMA head"),
])
def test_settings_the_job_cannot_run_are_refused_at_validation(base, settings, key, fragment):
    from intact.config import ConfigError, validate_config
    from intact.testing import tiny_config

    cfg = tiny_config(methods=[base])
    cfg["methods"][base] = dict(settings)
    msg = str(pytest.raises(ConfigError, validate_config, cfg, check_files=False).value)
    assert f"methods.{base}.{key}" in msg and fragment in msg, msg
    if key == "general_layers":   # without the adaptive EMA, no general prompt is a setting the job runs
        cfg["methods"][base]["ema_head"] = False
        validate_config(cfg, check_files=False)


# ---- KA-Prompt's greedy initialisation -------------------------------------------------------------

def _greedy_by_brute_force(sim: torch.Tensor, count: int) -> list[int]:
    """Each next key maximises the total coverage sum_n max(picked + [key]) (ties: lowest index)."""
    picked: list[int] = []
    for _ in range(count):
        def cover(i):
            return float(sim[picked + [i]].max(0).values.sum())
        best = max(range(sim.shape[0]), key=lambda i: (round(cover(i), 6), -i))
        picked.append(best)
    return picked


@pytest.mark.parametrize("base", ["compositional_prompt", "ka_prompt"])
def test_one_lr_for_every_group_and_the_methods_weight_decay_reach_the_optimizer(base):
    """``methods.<m>.lr`` (the paper configs set it, as the authors' scripts pass one ``--lr``) is the lr of every
    group the task's optimizer gets, in place of ``optim.lr_head`` / ``lr_prompt``; the method's ``weight_decay``
    replaces ``optim.weight_decay``. Unset, the two ``optim`` rates stay."""
    from intact.methods import create_method
    from intact.testing import tiny_config
    from intact.train import build_optimizer

    cfg = tiny_config(methods=[base])
    for name, lr in ((f"{base}@methods.{base}.lr=0.0123", 0.0123), (base, None)):
        run = resolve_run(cfg, "digits", name, 0)
        opt, _ = build_optimizer(create_method(run, _backbone(), 10, 3), run.optim, 5)
        groups = {g["name"]: (g["initial_lr"], g["weight_decay"]) for g in opt.param_groups}
        expected = (lr or run.optim.lr_head, lr or run.optim.lr_prompt)
        assert groups == {"head": (expected[0], run.settings.weight_decay),
                          "prompts": (expected[1], run.settings.weight_decay)}
        assert run.settings.weight_decay != run.optim.weight_decay and run.optim.lr_head != run.optim.lr_prompt


def test_greedy_initialisation_picks_the_highest_coverage_keys():
    g = torch.Generator().manual_seed(0)
    sim = torch.rand(7, 40, generator=g)
    slots = greedy_slots(sim, 3, torch.Generator().manual_seed(0))
    assert [i for i, j in slots] == _greedy_by_brute_force(sim, 3) and all(i == j for i, j in slots)
    assert slots[0][0] == int(sim.sum(1).argmax())
    # two keys cover everything: the remaining slots are means of two picked keys, drawn from the seed
    sim = torch.tensor([[0.9, 0.9, 0.1, 0.1], [0.1, 0.1, 0.9, 0.9], [0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0]])
    slots = greedy_slots(sim, 5, torch.Generator().manual_seed(3))
    assert [s[0] for s in slots[:2]] == [0, 1] and all(set(s) <= {0, 1} for s in slots[2:])
    assert slots == greedy_slots(sim, 5, torch.Generator().manual_seed(3))
    assert greedy_slots(sim, 4, torch.Generator(), always_argmax=True)[2:] == [(0, 0), (0, 0)]


def test_ka_prompt_copies_the_greedy_slots_into_the_new_slice(tiny_bench):
    run = resolve_run(tiny_bench["config"], "digits", "ka_prompt", 0)
    bench, m, _ = build_method(run, tiny_bench["manifest"], tiny_bench["weights"], torch.device("cpu"))
    enter_task(m, 0, m.training_data(bench, 0))
    with torch.no_grad():  # distinct old keys, as training would leave them
        m.pool.keys[:3] = torch.randn(3, m.pool.keys.shape[1], generator=torch.Generator().manual_seed(0))
    before = {k: v.detach().clone() for k, v in trainable_state(m).items()}
    data = m.training_data(bench, 1)
    enter_task(m, 1, data)
    q = torch.cat([m.backbone.query(x, "patch_mean") for x, _ in eval_batches(data, 64, torch.device("cpu"))])
    sim = (F.normalize(before["pool.keys"][:3], dim=1) @ F.normalize(q, dim=1).T + 1) / 2
    assert len(m.greedy) == 3 and m.greedy[0] == (_greedy_by_brute_force(sim, 1)[0],
                                                  ) * 2   # the best-covering key first
    for new, (i, j) in zip(range(3, 6), m.greedy):
        torch.testing.assert_close(m.pool.keys[new], (before["pool.keys"][i] + before["pool.keys"][j]) / 2)
        torch.testing.assert_close(m.pool.prompts["2"][new],
                                   (before["pool.prompts.2"][i] + before["pool.prompts.2"][j]) / 2)
    assert torch.equal(m.pool.keys[:3], before["pool.keys"][:3])


# ---- end to end on the tiny benchmark --------------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tiny_bench, tmp_path_factory):
    root = tmp_path_factory.mktemp("compositional_prompt")
    out = {}
    for method in METHODS:
        run = resolve_run(tiny_bench["config"], "digits", method, 0)
        folder = root / method
        R = train_on_tiny(tiny_bench, run, folder, TASKS)
        out[method] = {"run": run, "folder": folder, "R": R}
    return out


@pytest.mark.parametrize("method", METHODS)
def test_runs_end_to_end(runs, method):
    z = runs[method]
    for t in range(TASKS):
        record = read_json(z["folder"] / f"task{t}/train.json")
        assert record["trainable_parameters"] > 0 and -1e3 < record["ema_gamma"] < 1
        state = load_tensors(z["folder"] / f"task{t}/state.safetensors")
        assert int(state["ema.registered"]) == 1 and not any(k.startswith("backbone.") for k in state)
    R = z["R"]
    assert torch.isfinite(R).all() and (R.diag() > 20).all(), f"{method}: {R.tolist()}"
    epoch = read_json(z["folder"] / "task1/train.json")["epochs"][0]
    assert 0 < epoch["aux"] < 0.5 * 2 * 2          # key_weight * sum over top-2 of (1 - cos) <= 0.5 * 2 * 2
    if method.startswith("ka_prompt"):
        assert epoch["ka_aux"] > 0 and read_json(z["folder"] / "task1/train.json")["greedy_init"]
    if "+intact" in method:
        assert "intdrift" in epoch


def test_the_evaluated_head_is_the_ema_head(runs, tiny_bench):
    z = runs["compositional_prompt"]
    state = load_tensors(z["folder"] / "task2/state.safetensors")
    assert not torch.equal(state["ema.shadow_fc0__weight"], state["head.fc0.weight"])
    run = z["run"]
    bench, m, _ = build_method(run, tiny_bench["manifest"], tiny_bench["weights"], torch.device("cpu"),
                              state=z["folder"] / "task2/state.safetensors", state_task=2)
    m.eval()
    x = next(iter(eval_batches(bench.eval_set(0, "test"), 8, torch.device("cpu"))))[0]
    with torch.no_grad():
        zf, _ = m.features(x, m.query(x))
        torch.testing.assert_close(m.predict(x), zf @ state["ema.shadow_fc0__weight"].T + state["ema.shadow_fc0__bias"])


@pytest.mark.parametrize("method", ["compositional_prompt+intact", "ka_prompt"])
def test_resume_mid_task_is_bit_identical(runs, tiny_bench, tmp_path, method):
    z = runs[method]
    out = tmp_path / "cut"
    with pytest.raises(Preempted):
        train_one(tiny_bench, z["run"], out / "task1", 1, z["folder"] / "task0", max_steps=2)
    record = train_one(tiny_bench, z["run"], out / "task1", 1, z["folder"] / "task0")
    assert record["resumed_from"] == {"epoch": 0, "step": 2}
    a, b = load_tensors(z["folder"] / "task1/state.safetensors"), load_tensors(out / "task1/state.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@CPU_CLAIM
def test_the_query_and_teacher_caches_are_exact(runs, tiny_bench, tmp_path):
    """token-1 query and L_Feat teacher computed once per task = computed every step (CPU, fp32), to rounding: the
    live path's last bits depend on the memory layout MKL's kernels see (at 3e6ed78 the run named
    c_prompt+intact@optim.feature_cache=false matched the cached run bit for bit, and the same run under a name of
    another length did not, by up to 4e-7; with MKL_CBWR=COMPATIBLE both agree, and differ from the cached run by
    6e-8)."""
    z = runs["compositional_prompt+intact"]
    assert "computed" in read_json(z["folder"] / "task1/train.json")["feature_cache"]["teacher"]
    live = resolve_run(tiny_bench["config"], "digits", "compositional_prompt+intact@optim.feature_cache=false", 0)
    for t in range(2):
        train_one(tiny_bench, live, tmp_path / f"task{t}", t, tmp_path / f"task{t - 1}" if t else None)
    assert read_json(tmp_path / "task1/train.json")["feature_cache"]["used"] is False
    a, b = load_tensors(z["folder"] / "task1/state.safetensors"), load_tensors(tmp_path / "task1/state.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-6, atol=1e-6, msg=k)


def _tokens_per_step(monkeypatch) -> list[int]:
    """Calls of the backbone's token embedding inside each training step's loss (one per pass begun)."""
    import intact.train

    calls, per_step = [0], []
    orig_tokens, orig_loss = FrozenViT.tokens, intact.train.batch_loss

    def tokens(self, x):
        calls[0] += 1
        return orig_tokens(self, x)

    def loss(method, x, y):
        before = calls[0]
        out = orig_loss(method, x, y)
        per_step.append(calls[0] - before)
        return out

    monkeypatch.setattr(FrozenViT, "tokens", tokens)
    monkeypatch.setattr(intact.train, "batch_loss", loss)
    return per_step


def test_ka_prompt_previous_model_trunk_cache_is_exact(runs, tiny_bench, tmp_path, monkeypatch):
    """KA-Prompt's auxiliary pass reads the previous model's blocks before the first expert block from a
    per-task cache (``old_trunk``); cached = live bit for bit (CPU, fp32), also over the cache's budget."""
    import intact.cache

    z = runs["ka_prompt+intact"]
    cache = read_json(z["folder"] / "task1/train.json")["feature_cache"]
    assert cache["old_trunk"] == "computed at the start of the task"
    assert "old_trunk" not in read_json(z["folder"] / "task0/train.json")["feature_cache"]  # no previous model
    a = load_tensors(z["folder"] / "task1/state.safetensors")
    live = resolve_run(tiny_bench["config"], "digits", "ka_prompt+intact@optim.feature_cache=false", 0)
    for t in range(2):
        train_one(tiny_bench, live, tmp_path / f"live/task{t}", t, tmp_path / f"live/task{t - 1}" if t else None)
    b = load_tensors(tmp_path / "live/task1/state.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the cache is read: the step begins one pass (the prompted one) with it, two without (+ the previous model)
    per_step = _tokens_per_step(monkeypatch)
    train_one(tiny_bench, z["run"], tmp_path / "again/task1", 1, z["folder"] / "task0")
    assert per_step and set(per_step) == {1}
    monkeypatch.setattr(intact.cache, "MAX_SEQUENCE_CACHE_BYTES", 0)  # over the budget: the live path
    per_step.clear()
    record = train_one(tiny_bench, z["run"], tmp_path / "budget/task1", 1, z["folder"] / "task0")
    assert record["feature_cache"]["old_trunk"].startswith("not cached") and set(per_step) == {2}
    for d in ("again", "budget"):
        c = load_tensors(tmp_path / d / "task1/state.safetensors")
        assert all(torch.equal(a[k], c[k]) for k in a)
