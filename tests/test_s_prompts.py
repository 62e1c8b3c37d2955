"""S-Prompts: the nearest k-means centre picks the right domain, prompts go in after [CLS], +intact is
refused with its reason, and the method trains, resumes and evaluates on the tiny benchmark."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from intact.config import ConfigError, resolve_run
from intact.io import load_tensors, read_json
from intact.models.backbone import FrozenViT, create_vit
from intact.methods.impl.s_prompts import choose_domain, forward_with_tokens, kmeans_centres
from intact.restore import build_method

from conftest import CPU_CLAIM, train_on_tiny, train_one

TASKS = 3


def _domain(direction: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    """Features of one domain: 3 sub-clusters around ``direction`` (a domain is not one blob)."""
    subs = direction + 0.3 * torch.randn(3, direction.numel(), generator=g)
    return subs[torch.arange(n) % 3] + 0.05 * torch.randn(n, direction.numel(), generator=g)


@pytest.mark.parametrize("distance", ["l1", "l2"])
def test_nearest_kmeans_centre_picks_the_right_domain_on_separable_domains(distance):
    g = torch.Generator().manual_seed(0)
    D, T = 16, 4
    directions = 2 * torch.eye(D)[:T] + 0.1 * torch.randn(T, D, generator=g)
    train = [_domain(directions[t], 60, g) for t in range(T)]
    centres = torch.stack([kmeans_centres(F.normalize(f, dim=1), 5) for f in train])
    assert centres.shape == (T, 5, D)
    test = torch.cat([_domain(directions[t], 40, g) for t in range(T)])
    truth = torch.arange(T).repeat_interleave(40)
    assert torch.equal(choose_domain(test, centres, distance), truth)
    # the features are normalised before the distance (as the centres were): scale does not matter
    assert torch.equal(choose_domain(7.0 * test, centres, distance), truth)
    # a wrong centre set (domains shuffled) gives the shuffled answer: the choice follows the centres
    perm = torch.tensor([2, 0, 3, 1])
    assert torch.equal(choose_domain(test, centres[perm], distance), torch.argsort(perm)[truth])


def test_l1_is_the_official_distance_and_l2_the_papers_reading():
    # f - c0 = (0.5, 0): L1 0.5, L2 0.5;  f - c1 = (0.3, 0.3): L1 0.6, L2 0.42 -> the two readings disagree
    f = torch.tensor([[1.0, 0.0]])
    centres = torch.tensor([[[0.5, 0.0]], [[0.7, -0.3]]])
    assert choose_domain(f, centres, "l1").item() == 0
    assert choose_domain(f, centres, "l2").item() == 1


def test_prompt_tokens_are_inserted_right_after_cls_without_position_embedding():
    torch.manual_seed(0)
    vit = create_vit("vit_digits_p8")
    bb = FrozenViT(vit, (0.5,), (0.5,))
    x = torch.rand(2, 1, 32, 32)
    p = torch.randn(2, 3, bb.embed_dim)
    h = bb.tokens(x)
    manual = vit.norm(vit.blocks(torch.cat((h[:, :1], p, h[:, 1:]), 1)))[:, 0]
    assert torch.equal(forward_with_tokens(bb, x, p), manual)
    assert torch.equal(forward_with_tokens(bb, x, p[:, :0]), bb.query(x))


def test_s_prompts_plus_intact_is_refused_with_the_reason(tiny_bench):
    with pytest.raises(ConfigError, match="does not accept '\\+intact': it shares no component between domains"):
        resolve_run(tiny_bench["config"], "digits", "s_prompts+intact", 0)
    from intact.config import validate_config

    cfg = {**tiny_bench["config"], "run": {**tiny_bench["config"]["run"], "methods": ["s_prompts+intact"]}}
    with pytest.raises(ConfigError, match="nothing to protect.*declared in run.methods"):
        validate_config(cfg, check_files=False)


# ---- end to end on the tiny benchmark ---------------------------------------------------------------

def test_s_prompts_trains_three_domains_and_picks_them_at_test(tiny_bench, tmp_path):
    run = resolve_run(tiny_bench["config"], "digits", "s_prompts", 0)
    R = train_on_tiny(tiny_bench, run, tmp_path, TASKS)
    assert (R.diag() > 20).all(), R
    s0, s2 = load_tensors(tmp_path / "task0/state.safetensors"), load_tensors(tmp_path / "task2/state.safetensors")
    assert int(s2["domains"]) == 3 and s2["centres"].abs().sum(-1).gt(0).all()
    # nothing shared: domain 0's prompt and head are untouched by later domains
    assert torch.equal(s0["prompts.0"], s2["prompts.0"])
    assert torch.equal(s0["heads.0.fc0.weight"], s2["heads.0.fc0.weight"])
    assert read_json(tmp_path / "task0/train.json")["trainable_parameters"] == s0["prompts.0"].numel() + 64 * 10 + 10
    # the k-means saw the cached unprompted features: the same centres as the live path computes
    bench, method, _ = build_method(run, tiny_bench["manifest"], tiny_bench["weights"], torch.device("cpu"),
                                   state=tmp_path / "task1/state.safetensors")
    method.end_task(2, bench.train_set(2))
    if not torch.cuda.is_available():   # a claim made for the CPU in fp32 (conftest.CPU_CLAIM): the run trained there
        assert torch.equal(method.centres[2], s2["centres"][2])
    # the test-time domain choice on task 1's test images is mostly right (the digits' domains are separable)
    x = torch.stack([bench.eval_set(1)[i][0] for i in range(64)])
    with torch.no_grad():
        chosen = choose_domain(method.query(x), method.centres[:3])
    assert (chosen == 1).float().mean() > 0.5
    # the run collects like every other (a method that keeps no hypercube has none in metrics.json)
    from intact.results import collect_run

    paths = [tmp_path / f"task{t}" for t in range(TASKS)]
    metrics = collect_run([p / "eval.json" for p in paths], [p / "train.json" for p in paths], tmp_path / "R.csv",
                          tmp_path / "metrics.json", 10)
    assert metrics["hypercube_log_volume"] == [None] * TASKS and metrics["certificate"] == [None] * TASKS


def test_s_prompts_resumes_mid_task_bit_identically(tiny_bench, tmp_path):
    run = resolve_run(tiny_bench["config"], "digits", "s_prompts", 0)
    train_one(tiny_bench, run, tmp_path / "full", 0)
    with pytest.raises(SystemExit):
        train_one(tiny_bench, run, tmp_path / "cut", 0, max_steps=2)
    record = train_one(tiny_bench, run, tmp_path / "cut", 0)
    assert record["resumed_from"] == {"epoch": 0, "step": 2}
    a, b = load_tensors(tmp_path / "full/state.safetensors"), load_tensors(tmp_path / "cut/state.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@CPU_CLAIM
def test_s_prompts_with_the_query_cache_equals_the_live_run_bit_for_bit(tiny_bench, tmp_path):
    from intact.cache import build_query_cache
    from test_cache import _run as run_with_cache, _train_eval

    cfg, manifest, w = tiny_bench["config"], tiny_bench["manifest"], tiny_bench["weights"]
    cached_run = run_with_cache(cfg, "digits", "s_prompts", True)
    qdir = tmp_path / "query"
    build_query_cache(cached_run.backbone, manifest, w, qdir, threads=1, progress=False)
    R0, s0, _ = _train_eval(run_with_cache(cfg, "digits", "s_prompts", False), manifest, w, tmp_path / "live", 2, None)
    R1, s1, _ = _train_eval(cached_run, manifest, w, tmp_path / "cached", 2, qdir)
    assert R0 == R1                                                     # the domain choice at test included
    assert s0.keys() == s1.keys() and all(torch.equal(s0[k], s1[k]) for k in s0)   # the k-means centres included
    rec = read_json(tmp_path / "cached/task1/train.json")["feature_cache"]
    assert rec["used"] and rec["query"].startswith("read from")


def test_bench_counts_one_prompted_pass_per_step():
    from conftest import tiny_config
    from intact.speed import bench_row

    row = bench_row(tiny_config(methods=["s_prompts"]), "digits", "s_prompts", False, model="vit_rgb_p8", batch=8,
                    repeats=2, device=torch.device("cpu"), amp=False, classes=10, tasks=3)
    assert row["passes_per_step"] == 1 and row["trainable_params"] == 10 * 64 + 64 * 10 + 10   # domain known: no query
