"""The method zoo: each method's defining behaviour, and a tiny end-to-end run of every method."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from intact.config import resolve_run
from intact.io import load_tensors, read_json
from intact.methods.shared.base import Batch, batch_loss, enter_task, frozen_prefixes, trainable_state
from intact.methods import create_method
from intact.methods.impl.dualprompt import DualPromptPool
from intact.methods.impl.l2p import L2PPool
from intact.models.shared_prompt import SharedPrompt, split_prompt
from intact.regularizers.ewc import empirical_fisher, ewc_penalty
from intact.regularizers.lwf import distillation_loss

from conftest import train_on_tiny, train_one

METHODS = ["l2p", "l2p+intact", "dualprompt", "dualprompt+intact", "finetune", "ewc", "lwf", "joint"]
TASKS = 3


# ---- L2P ------------------------------------------------------------------------------------------

def _cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_l2p_selects_top_k_keys_by_cosine_as_computed_by_hand():
    keys = [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 0.0], [-1.0, 0.0, 1.0]]
    queries = [[2.0, 1.0, 0.0], [0.0, 0.1, 1.0]]
    # by hand: the k = 2 keys with the largest cosine, in decreasing order (magnitudes must not matter)
    expected = [sorted(range(5), key=lambda i: -_cos(q, keys[i]))[:2] for q in queries]
    assert expected == [[3, 0], [2, 4]]

    pool = L2PPool(embed_dim=3, pool_size=5, length=4, top_k=2)
    with torch.no_grad():
        pool.keys.copy_(torch.tensor(keys))
        pool.prompts["0"].copy_(torch.arange(5 * 4 * 3, dtype=torch.float32).view(5, 4, 3))
    q = torch.tensor(queries)
    cos, idx = pool.select(q)
    assert idx.tolist() == expected
    torch.testing.assert_close(cos, torch.tensor([[_cos(a, k) for k in keys] for a in queries]))

    prefix, _ = pool.eval()(q)
    assert list(prefix) == [0]                   # block 0 only
    pk, pv = prefix[0]
    P = pool.prompts["0"]
    for b, sel in enumerate(expected):           # per selected prompt: first half -> keys, second half -> values
        torch.testing.assert_close(pk[b], torch.cat([P[i, :2] for i in sel]))
        torch.testing.assert_close(pv[b], torch.cat([P[i, 2:] for i in sel]))


def test_l2p_matching_loss_is_per_sample():
    g = torch.Generator().manual_seed(0)
    pool = L2PPool(embed_dim=8, pool_size=6, length=2, top_k=2, match_weight=1.0)
    pool.begin_task(0, g)
    pool.train()
    q = torch.randn(4, 8, generator=g)
    cos, idx = pool.select(q)
    assert len({tuple(sorted(r)) for r in idx.tolist()}) > 1   # samples select different keys
    _, aux = pool(q)
    by_hand = sum(sum(1 - _cos(q[b].tolist(), pool.keys[i].tolist()) for i in idx[b].tolist()) for b in range(4)) / 4
    assert aux.item() == pytest.approx(by_hand, rel=1e-5)
    # no cross-sample terms: the batch loss is the mean of the single-sample losses ...
    singles = torch.stack([pool(q[b : b + 1])[1] for b in range(4)])
    torch.testing.assert_close(aux, singles.mean())
    # ... unlike the reference code's cos[:, idx] slip, which pulls every key any sample selected to every query
    assert not torch.isclose(aux, (1 - cos[:, idx]).sum() / 4)
    # keys no sample selected get no gradient; the query is not trained through the loss
    qr = q[:1].clone().requires_grad_(True)
    pool.keys.grad = None
    pool(qr)[1].backward()
    unused = sorted(set(range(6)) - set(idx[0].tolist()))
    assert unused and pool.keys.grad[unused].abs().sum() == 0
    assert qr.grad is None
    assert pool.eval()(q)[1].item() == 0.0                     # no matching loss at test time


# ---- DualPrompt -------------------------------------------------------------------------------------

def _dual_pool() -> DualPromptPool:
    pool = DualPromptPool(embed_dim=4, num_tasks=3, g_length=2, g_layers=(0,), e_length=4, e_layers=(1, 2))
    g = torch.Generator().manual_seed(0)
    for t in range(3):
        pool.begin_task(t, g)
    with torch.no_grad():
        pool.keys.copy_(torch.eye(4)[:3])
    return pool


def test_dualprompt_uses_the_tasks_own_e_prompt_in_training_and_the_best_key_at_test():
    pool = _dual_pool()
    pool.task.fill_(1)
    q = torch.tensor([[5.0, 0.1, 0.0, 0.0], [0.1, 3.0, 0.0, 0.0], [0.0, 0.2, 0.0, 1.0], [0.0, 0.0, 9.0, 0.0]])
    E = pool.e_prompts["1"]
    # training: task 1's E-prompt for every image, whatever its query
    prefix, aux = pool.train()(q)
    for b in range(4):
        torch.testing.assert_close(torch.cat([prefix[1][0][b], prefix[1][1][b]]), E[1])
    assert aux.item() == pytest.approx(float((1 - F.cosine_similarity(q, pool.keys[1].detach().expand(4, -1))).mean()))
    aux.backward()
    assert pool.keys.grad[1].abs().sum() > 0 and pool.keys.grad[[0, 2]].abs().sum() == 0
    # test: the best-matching key among the tasks seen so far (key 2 belongs to a later task: no candidate)
    prefix, aux = pool.eval()(q)
    assert aux.item() == 0.0
    for b, task in enumerate([0, 1, 1, 0]):
        torch.testing.assert_close(torch.cat([prefix[1][0][b], prefix[1][1][b]]), E[task])
    pool.task.fill_(2)
    assert pool.select(q)[1].tolist() == [0, 1, 1, 2]
    # the G-prompt: the same for every image, in both modes, at its own block only
    G = pool.g_prompts["0"]
    for mode in (True, False):
        prefix, _ = pool.train(mode)(q)
        assert sorted(prefix) == [0, 1, 2]
        torch.testing.assert_close(prefix[0][0], G[:1].expand(4, -1, -1))
        torch.testing.assert_close(prefix[0][1], G[1:].expand(4, -1, -1))


def test_dualprompt_trains_only_the_current_tasks_e_prompt():
    pool = _dual_pool().train()
    pool.task.fill_(2)
    prefix, aux = pool(torch.randn(3, 4))
    (sum(k.sum() + v.sum() for k, v in prefix.values()) + aux).backward()
    grad = pool.e_prompts["2"].grad
    assert grad[2].abs().sum() > 0 and grad[:2].abs().sum() == 0
    assert pool.g_prompts["0"].grad.abs().sum() > 0


def test_shared_prompt_is_the_same_for_every_input_and_initialised_once():
    sp = SharedPrompt(embed_dim=4, length=4, layers=(0, 2))
    sp.begin_task(0, torch.Generator().manual_seed(0))
    drawn = sp.prompts["0"].detach().clone()
    sp.begin_task(1, torch.Generator().manual_seed(1))          # continuing: not re-drawn
    assert torch.equal(sp.prompts["0"], drawn)
    prefix, aux = sp(torch.randn(3, 4))
    assert sorted(prefix) == [0, 2] and aux.item() == 0.0
    torch.testing.assert_close(prefix[0][0], drawn[:2].expand(3, -1, -1))
    torch.testing.assert_close(prefix[0][1], drawn[2:].expand(3, -1, -1))
    k, v = split_prompt(torch.arange(2 * 4 * 1.0).view(1, 2, 4, 1))    # 2 prompts of length 4, D = 1
    assert k.flatten().tolist() == [0, 1, 4, 5] and v.flatten().tolist() == [2, 3, 6, 7]


# ---- frozen submodules ---------------------------------------------------------------------------

def _frozen_prefixes_by_brute_force(module: nn.Module) -> tuple[str, ...]:
    out: list[str] = []
    for name, m in module.named_modules():
        params = list(m.parameters())
        if name and params and not any(p.requires_grad for p in params) and not name.startswith(tuple(out)):
            out.append(name + ".")
    return tuple(out)


def _random_tree(rng, depth: int) -> nn.Module:
    m = nn.Module()
    for i in range(int(rng.integers(0, 4)) if depth else 0):
        setattr(m, f"c{i}", _random_tree(rng, depth - 1))
    if rng.random() < 0.5:
        m.w = nn.Parameter(torch.zeros(1), requires_grad=bool(rng.random() < 0.4))
    if rng.random() < 0.2:
        m.register_buffer("b", torch.zeros(1))
    return m


def test_frozen_prefixes_equal_brute_force_on_random_trees_with_shared_modules():
    import numpy as np

    rng = np.random.default_rng(0)
    kinds = set()
    for _ in range(300):
        tree = _random_tree(rng, 4)
        mods = [m for _, m in tree.named_modules()]
        if len(mods) > 2 and rng.random() < 0.3:       # one submodule also reachable under a second name
            host, shared = mods[int(rng.integers(0, len(mods)))], mods[int(rng.integers(1, len(mods)))]
            if shared is not host and host not in {m for _, m in shared.named_modules()}:
                host.add_module("again", shared)
        expected = _frozen_prefixes_by_brute_force(tree)
        assert frozen_prefixes(tree) == expected
        kinds.add(len(expected) > 0)
    assert kinds == {True, False}                       # both cases drawn


# ---- EWC / LwF penalties ----------------------------------------------------------------------------

def test_ewc_penalty_is_zero_at_the_anchor_and_grows_with_fisher_weighted_distance():
    anchor = {"w": torch.tensor([1.0, -2.0, 0.5]), "b": torch.tensor([0.3])}
    fisher = {"w": torch.tensor([2.0, 0.0, 1.0]), "b": torch.tensor([4.0])}
    assert ewc_penalty(anchor, anchor, fisher, lam=10.0).item() == 0.0
    step = {"w": torch.tensor([0.1, 0.0, -0.2]), "b": torch.tensor([0.05])}
    by_hand = 0.5 * 10.0 * (2 * 0.1**2 + 1 * 0.2**2 + 4 * 0.05**2)
    moved = lambda s: {k: anchor[k] + s * step[k] for k in anchor}   # noqa: E731
    assert ewc_penalty(moved(1), anchor, fisher, lam=10.0).item() == pytest.approx(by_hand)
    values = [ewc_penalty(moved(s), anchor, fisher, lam=10.0).item() for s in (1, 2, 3)]
    assert values == pytest.approx([by_hand, 4 * by_hand, 9 * by_hand])             # quadratic in the distance
    # a coordinate with zero Fisher is free to move
    free = {"w": anchor["w"] + torch.tensor([0.0, 100.0, 0.0]), "b": anchor["b"]}
    assert ewc_penalty(free, anchor, fisher, lam=10.0).item() == 0.0


def test_empirical_fisher_is_the_mean_squared_per_sample_gradient():
    torch.manual_seed(0)
    model = nn.Linear(5, 3)
    x, y = torch.randn(10, 5), torch.randint(0, 3, (10,))
    params = dict(model.named_parameters())

    def nll(p, xb, yb):
        return F.cross_entropy(functional_call(model, p, (xb,)), yb, reduction="sum")

    fisher = empirical_fisher(nll, params, [(x[:6], y[:6]), (x[6:], y[6:])], chunk_size=4)
    expected = {k: torch.zeros_like(v) for k, v in params.items()}
    for i in range(10):
        model.zero_grad()
        F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        for k, v in params.items():
            expected[k] += v.grad.pow(2) / 10
    for k in params:
        torch.testing.assert_close(fisher[k], expected[k])


def test_distillation_is_zero_for_an_unchanged_model_and_positive_otherwise():
    logits = torch.randn(6, 10)
    assert distillation_loss(logits, logits.clone(), temperature=2.0).item() == pytest.approx(0.0, abs=1e-7)
    assert distillation_loss(logits + torch.randn(6, 10), logits, temperature=2.0).item() > 0
    assert distillation_loss(logits + 3.0, logits,
                             temperature=2.0).item() == pytest.approx(0.0, abs=1e-6)  # softmax shift


# ---- methods on the tiny benchmark ------------------------------------------------------------------

def _run(bench, method: str):
    return resolve_run(bench["config"], "digits", method, 0)


@pytest.fixture(scope="module")
def zoo(tiny_bench, tmp_path_factory):
    """Every method trained and evaluated on the 3 tiny tasks (1 epoch each); R per method."""
    root = tmp_path_factory.mktemp("zoo")
    out: dict[str, dict] = {}
    for method in METHODS:
        run = _run(tiny_bench, method)
        folder = root / method
        R = train_on_tiny(tiny_bench, run, folder, TASKS)
        out[method] = {"run": run, "folder": folder, "R": R}
    return out


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_end_to_end(zoo, method):
    z = zoo[method]
    for t in range(TASKS):
        for name in ("state.safetensors", "hypercube.safetensors", "train.json", "eval.json"):
            assert (z["folder"] / f"task{t}" / name).is_file(), f"{method} task{t}/{name}"
        assert not (z["folder"] / f"task{t}/checkpoint.pt").exists()
        record = read_json(z["folder"] / f"task{t}/train.json")
        assert record["method"] == method and record["trainable_parameters"] > 0
        state = load_tensors(z["folder"] / f"task{t}/state.safetensors")
        assert not any(k.startswith(("backbone.", "teacher.", "previous.")) for k in state)
    R = z["R"]
    assert torch.isfinite(R).all() and (R >= 0).all() and (R <= 100).all()
    assert (R.diag() > 20).all(), f"{method}: accuracy on the task just trained {R.diag().tolist()} (chance: 10%)"
    if "+intact" in method:
        assert "intdrift" in read_json(z["folder"] / "task1/train.json")["epochs"][0]


def test_l2p_and_dualprompt_log_their_matching_loss(zoo):
    for method in ("l2p", "dualprompt"):
        epoch = read_json(zoo[method]["folder"] / "task0/train.json")["epochs"][0]
        assert 0 < epoch["aux"] < 2 * (3 if method == "l2p" else 1)


def test_ewc_state_carries_fisher_and_anchor_to_the_next_task(zoo, tiny_bench):
    from intact.restore import build_method

    folder = zoo["ewc"]["folder"]
    s0, s1 = load_tensors(folder / "task0/state.safetensors"), load_tensors(folder / "task1/state.safetensors")
    fisher = {k: v for k, v in s0.items() if k.startswith("fisher.")}
    assert fisher and all((v >= 0).all() for v in fisher.values()) and any(v.sum() > 0 for v in fisher.values())
    assert torch.equal(s0["anchor_params.head__fc0__weight"],
                       s0["head.fc0.weight"])          # anchor = the task's end point
    for k in fisher:  # accumulated, never reset
        assert (s1[k] >= fisher[k]).all() and s1[k].sum() > fisher[k].sum()
    assert read_json(folder / "task1/train.json")["epochs"][0]["ewc"] > 0
    # a fresh process loading the state: the penalty is zero at the anchor and positive away from it
    _, method, _ = build_method(zoo["ewc"]["run"], tiny_bench["manifest"], tiny_bench["weights"], torch.device("cpu"),
                               state=folder / "task0/state.safetensors")
    method.task = 1
    x = torch.zeros(2, 1, 32, 32)
    ewc = method.penalties[0]
    batch = Batch(x, torch.zeros(2, dtype=torch.long), torch.zeros(2, 10), method.query(x))
    assert ewc.terms(method, batch)["ewc"].item() == 0.0
    with torch.no_grad():
        method.head.fc0.weight.add_(0.1)
    assert ewc.terms(method, batch)["ewc"].item() > 0


def test_lwf_loss_is_zero_while_prompt_and_head_are_unchanged(zoo, tiny_bench):
    from intact.restore import build_method

    folder = zoo["lwf"]["folder"]
    bench, method, _ = build_method(zoo["lwf"]["run"], tiny_bench["manifest"], tiny_bench["weights"],
                                   torch.device("cpu"),
                                   state=folder / "task0/state.safetensors")
    enter_task(method, 1, bench.train_set(1))
    method.train()
    x, y = next(iter(torch.utils.data.DataLoader(bench.train_set(1), batch_size=16)))
    _, terms = batch_loss(method, x, y)
    assert terms["lwf"].item() == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        method.pool.prompts["0"].add_(0.5)
    assert batch_loss(method, x, y)[1]["lwf"].item() > 1e-4
    with torch.no_grad():
        method.pool.prompts["0"].sub_(0.5)
        method.head.fc0.bias.add_(torch.linspace(-1, 1, 10))
    assert batch_loss(method, x, y)[1]["lwf"].item() > 1e-4
    assert not any(k.startswith("previous.") for k in trainable_state(method))
    assert read_json(folder / "task1/train.json")["epochs"][0]["lwf"] > 0


def test_joint_trains_on_the_union_of_tasks_and_ignores_the_previous_state(zoo, tiny_bench, tmp_path):
    from intact.restore import build_method

    bench, method, _ = build_method(zoo["joint"]["run"], tiny_bench["manifest"], tiny_bench["weights"],
                                   torch.device("cpu"))
    union = method.training_data(bench, 2)
    parts = [bench.train_set(t) for t in range(3)]
    assert len(union) == sum(len(p) for p in parts)
    assert torch.equal(union[len(parts[0]) + 5][0], parts[1][5][0])        # task 1's images, not task 0's again
    assert read_json(zoo["joint"]["folder"] / "task2/train.json")["train_images"] == len(union)
    finetune = create_method(zoo["finetune"]["run"], method.backbone, bench.num_classes, bench.num_tasks)
    assert len(finetune.training_data(bench, 2)) == len(parts[2])      # the default: the task's own data
    # task 1 from another method's state, or from no folder at all: bit-identical to the zoo's joint task 1
    run = zoo["joint"]["run"]
    train_one(tiny_bench, run, tmp_path / "other", 1, prev=zoo["finetune"]["folder"] / "task0")
    train_one(tiny_bench, run, tmp_path / "none", 1, prev=None)
    ref = load_tensors(zoo["joint"]["folder"] / "task1/state.safetensors")
    for variant in ("other", "none"):
        state = load_tensors(tmp_path / variant / "state.safetensors")
        assert state.keys() == ref.keys() and all(torch.equal(state[k], ref[k]) for k in ref)
    # and its hypercube covers its own training data only (nothing merged from a previous model)
    assert read_json(tmp_path / "other/train.json")["inside_previous"] == {}


def test_intact_is_refused_where_it_does_not_integrate(tiny_bench):
    from intact.config import ConfigError

    for method in ("ewc+intact", "lwf+intact", "joint+intact"):
        with pytest.raises(ConfigError, match="does not accept"):
            _run(tiny_bench, method)
    _run(tiny_bench, "finetune+intact")


@pytest.mark.parametrize("method,key", [
    ("coda_p", "layers"), ("l2p", "layers"), ("finetune", "layers"), ("ewc", "layers"),
    ("dualprompt", "g_layers"), ("dualprompt", "e_layers"),
])
def test_prompt_layers_past_the_backbone_are_refused_naming_the_key(tiny_bench, method, key):
    from intact.models.backbone import create_backbone

    base = method.split("+")[0]
    cfg = {**tiny_bench["config"], "methods": {**tiny_bench["config"]["methods"]}}
    cfg["methods"][base] = {**cfg["methods"][base], key: [2, 99]}  # block 2 is not in dualprompt's g_layers (0)
    run = resolve_run(cfg, "digits", method, 0)
    backbone, _ = create_backbone(run.backbone, tiny_bench["weights"])
    with pytest.raises(ValueError, match=rf"methods\.{base}\.{key} = \[2, 99\]: block 99 does not exist: the backbone "
                       r"has depth \d+"):
        create_method(run, backbone, 10, 3)
