"""The dress rehearsal (issue 42): configs/rehearsal.yaml over a paper config changes only the scale - the same
rules, targets and run names on synthetic data in the real layouts and tiny backbones made in the DAG - and every
table and figure it writes says it is a rehearsal. `pytest tests/test_rehearsal.py --rehearsal DIR` also reads the
outputs of a finished `intact rehearse` under DIR (.ci/run's rehearsal step)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, snakemake
from intact.config import load_config
from intact.data import benchmark_class
from intact.data.split_lists import check_split
from intact.config import resolve_run
from intact.layering import read_files
from intact.plan import Plan
from intact.rehearsal import BANNER, WEIGHTS, make_tree, rehearse, tree_params
from intact.rehearse import PAPER_CONFIGS, check_outputs, config_files, markdown_problems

PAPER = REPO / "configs" / "paper"
#: what a rehearsal adds to a paper config's DAG: its data and its weights
REHEARSAL_RULES = {"rehearsal_data", "rehearsal_backbone"}
#: the rules whose jobs follow the tune's checkpoint (tune_select): the final runs and the tune's report, which a dry
#: run cannot list before the choice exists
AFTER_TUNE_CHOICE = {"train_task", "collect_run", "track_run", "report_study_tune"}


def rehearsal_config(name: str) -> dict:
    return load_config(*map(str, config_files(REPO, name)), check_files=False)


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_the_rehearsal_changes_the_scale_and_nothing_else(name):
    real = load_config(*map(str, config_files(REPO, name)[:2]), check_files=False)
    cfg = rehearsal_config(name)
    plan, real_plan = Plan(cfg), Plan(real)
    # the same run names in every study and search; fewer seeds; every run a rehearsal's (its own hash)
    declared, real_declared = plan.declared_runs(), real_plan.declared_runs()
    assert {b: set(m) for b, m in declared.items()} == {b: set(m) for b, m in real_declared.items()}
    assert set(plan.tune_runs()[name]) == set(real_plan.tune_runs()[name])
    assert all(len(s) <= 2 for runs in declared.values() for s in runs.values())
    for method in list(declared[name])[:5]:
        ours, theirs = resolve_run(cfg, name, method, 0), resolve_run(real, name, method, 0)
        assert ours.rehearsal and not theirs.rehearsal and ours.hash() != theirs.hash()
        assert ours.optim.epochs == 1 and ours.optim.batch_size == 8 and ours.benchmark.image_size == 32
        assert ours.backbone.model == "vit_rehearsal_p16"
        assert ours.backbone.weights == WEIGHTS.format(backbone=ours.backbone.name)
        assert (ours.method, ours.base, ours.protocol) == (theirs.method, theirs.base, theirs.protocol)
    assert list(cfg["benchmarks"][name]["domains"]) == list(resolve_run(real, name, "coda_p", 0).benchmark.tasks)[:3]
    assert rehearse(cfg) == cfg                         # idempotent: a job's own parse gives the same config
    # its MLflow runs are kept apart: on the real runs' server a rehearsal run took a real run's place as current
    from intact.config import tracking_config

    assert tracking_config(cfg).experiment == "rehearsal/" + tracking_config(real).experiment


def test_every_optim_layer_gets_the_rehearsal_budget():
    cfg = read_files(config_files(REPO, "imagenet_r"))
    cfg["benchmarks"]["imagenet_r"]["overrides"]["optim"] = {"epochs": 7}
    out = rehearse(cfg)
    official = out["protocols"]["official"]["per_method"]
    assert official["inflora"]["optim"]["epochs"] == 1 and official["consistent_prompt"]["optim"]["batch_size"] == 8
    assert official["inflora"]["optim"]["test_resize"] == round(256 * 32 / 224)     # scaled with the images
    assert out["benchmarks"]["imagenet_r"]["overrides"]["optim"] == {"epochs": 1}
    assert out["experiments"] == cfg["experiments"]      # not part of a paper config's DAG
    assert "rehearsal" not in read_files(config_files(REPO, "imagenet_r")[:2])


def test_the_rehearsals_image_size_is_the_tiny_backbones():
    """Every tiny backbone (the stand-in, vit_rgb_p8, the digits ViTs) takes 32 px: before 2026-11-30
    ``rehearsal.image_size`` was declared ``>= 16``, and any other value failed the rehearsal's training jobs in timm's
    patch embedding. It is refused now, naming the key."""
    from intact.config import ConfigError, validate_config
    from intact.layering import merge

    cfg = read_files(config_files(REPO, "imagenet_r"))
    for size in (16, 64):
        with pytest.raises(ConfigError, match=rf"key 'rehearsal.image_size' = {size} is not allowed; expected one "
                           r"of \[32\]"):
            validate_config(merge(cfg, {"rehearsal": {"image_size": size}}), check_files=False)


def test_a_rehearsal_leaving_the_tune_no_validation_image_is_refused(tmp_path):
    """``rehearsal.per_class: 3`` (its declared minimum) leaves two training images a class and task, of which
    val_fraction 0.2 takes none: before 2026-11-30 every search point of the paper configs' tune failed in its job.
    Without a tune study nothing reads the validation part, and 3 is accepted. The check counts as the tree and the
    validation draw do."""
    import numpy as np

    from intact.config import ConfigError, validate_config
    from intact.data.prepared import val_rows
    from intact.layering import merge

    cfg = read_files(config_files(REPO, "imagenet_r"))
    with pytest.raises(ConfigError, match=r"key 'rehearsal.per_class' = 3: leaves each class 2 training images a "
                       r"task, of which val_fraction 0.2 of benchmark 'imagenet_r' takes none"):
        validate_config(merge(cfg, {"rehearsal": {"per_class": 3}}), check_files=False)
    validate_config(merge(cfg, {"rehearsal": {"per_class": 4}}), check_files=False)
    no_tune = merge(cfg, {"rehearsal": {"per_class": 3}})
    del no_tune["studies"]["tune"]
    validate_config(no_tune, check_files=False)
    for per_class, taken in ((3, 0), (4, 1)):
        params = tree_params(rehearse(merge(no_tune, {"rehearsal": {"per_class": per_class}})), "imagenet_r")
        make_tree(params, tmp_path / f"p{per_class}" / "tree.json")
        rows = (tmp_path / f"p{per_class}" / "lists" / "train.txt").read_text().split("\n")
        labels = np.array([int(r.split()[1]) for r in rows if r.startswith("n") and "/art_" in r])
        assert len(labels) == params["classes"] * (per_class - 1)
        assert len(val_rows(labels, 0.2, 0)) == params["classes"] * taken


@pytest.mark.parametrize("scale, message", [
    ({"seeds": 1}, r"key 'rehearsal.seeds' = 1: the tune study chooses by the mean over at least 2 selection seeds"),
    ({"domains": 1}, r"key 'rehearsal.domains' = 1: 1 is less than the minimum of 2"),
    ({"classes": 2, "per_class": 4, "batch_size": 5}, r"key 'rehearsal.batch_size' = 5: more than the 4 training "
                                                      r"images of a task in the synthetic tree of benchmark "
                                                      r"'domainnet', and an optim layer sets drop_last"),
])
def test_a_rehearsal_scale_its_jobs_cannot_run_names_the_rehearsal_key(scale, message):
    """Before 2026-11-30 each was accepted by the rehearsal's declaration and then failed: ``seeds: 1`` and
    ``domains: 1`` at validation naming a key the rehearsal had set (``studies.tune.selection_seeds``,
    ``benchmarks.digits_3.domains``), a batch larger than a task's synthetic training images in the official
    protocol's jobs (drop_last). ``batch_size: 4`` runs (docs/log/2026-11-30-settings-fuzz.md)."""
    from intact.config import ConfigError, validate_config
    from intact.layering import merge

    cfg = read_files(config_files(REPO, "domainnet"))
    with pytest.raises(ConfigError, match=message):
        validate_config(merge(cfg, {"rehearsal": scale}), check_files=False)
    if "batch_size" in scale:
        validate_config(merge(cfg, {"rehearsal": {**scale, "batch_size": 4}}), check_files=False)


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_the_synthetic_tree_passes_the_real_split_checks(name, tmp_path):
    """The rule rehearsal_data's tree, in the benchmark's real layout: its type's own split lists read it, and
    the real checks (labels, duplicates, train/test overlap, files present, byte-identical copies) pass."""
    from intact.data import BENCHMARKS, benchmark_settings
    from intact.data.synthetic import tree_keys

    cfg = rehearsal_config(name)
    bench = cfg["benchmarks"][name]
    info = make_tree(tree_params(cfg, name), tmp_path / "tree.json")
    assert (tmp_path / "tree.json").is_file() and info["files"] > 0 and info["banner"] == BANNER
    entry = {k: v for k, v in bench.items() if k != "overrides"}
    settings = benchmark_settings({**entry, **tree_keys(bench["type"], tmp_path), "name": name})
    tasks, _ = benchmark_class(bench["type"]).plan(settings)
    splits = {t.name: {"train": t.train, "test": t.test} for t in tasks}
    assert list(splits) == list(bench["domains"])
    check_split(splits, BENCHMARKS[bench["type"]].num_classes)
    assert {len(s["test"]) for s in splits.values()} == {8 * 2}     # 8 classes, every third of 6 a test image


def test_every_table_and_figure_of_a_rehearsal_says_so(tmp_path, monkeypatch):
    from intact.report import figures, plots
    from intact.report.paper_tables import paper_tables
    from intact.report.settings import report_settings
    from intact.report.render import write_table
    from intact.results import StoredResults, StoredRun

    trains = ({"config": {"rehearsal": True}},)
    run = StoredRun("imagenet_r", "coda_p", 0, {"aa": 50.0, "aa_evolution": [50.0], "task_names": ["a"],
                                                "num_tasks": 1}, trains)
    stored = StoredResults([run])
    assert stored.is_rehearsal and not StoredResults([StoredRun("imagenet_r", "coda_p", 0, {}, ({},))]).is_rehearsal
    table = paper_tables(report_settings(load_config(str(REPO / "config.yaml"), check_files=False)), stored)["main"]
    write_table(table, tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.tex", banner=BANNER)
    assert (tmp_path / "t.md").read_text().startswith(f"**{BANNER}**")
    assert pd.read_csv(tmp_path / "t.csv")["rehearsal"].all()
    assert "rehearsal" in pd.read_csv(tmp_path / "main_paired.csv").columns
    assert "\\caption{REHEARSAL: toy scale" in (tmp_path / "t.tex").read_text()
    marks = []
    monkeypatch.setattr(plots, "mark", lambda fig, banner: marks.append(banner))
    figures.aa_evolution(stored, "imagenet_r", ["coda_p"], [tmp_path / "f.png"])
    figures.aa_evolution(StoredResults(), "imagenet_r", ["coda_p"], [tmp_path / "g.png"])
    assert marks == [BANNER, None]


def _jobs(text: str) -> set[tuple[str, str | None]]:
    """(rule, method wildcard) of every job a Snakemake log or dry run lists (seeds and tasks left out)."""
    out = set()
    for block in re.split(r"\n(?=\[|(?:local)?(?:rule|checkpoint) )", text):
        m = re.search(r"^(?:local)?(?:rule|checkpoint) (\w+):", block, re.M)
        if m:
            w = re.search(r"wildcards: .*?\bmethod=(.*?)(?:, seed=|$)", block, re.M)
            out.add((m[1], w[1] if w else None))
    return out


def test_the_rehearsals_reading_finds_an_unexplained_dash_and_a_row_without_a_value():
    table = "### T\n\n| Method | AA |\n|:---|---:|\n| `a` | 1.00 |\n| `b` | — |\n"
    assert markdown_problems(table, own=True) == ["shows — without saying what it means", "row '`b`' has no value"]
    assert markdown_problems(table + "\n— = not run.\n", own=False) == []
    assert markdown_problems(table.replace("1.00", "nan"), own=False) == ["holds a NaN or Inf cell",
                                                                        "shows — without saying what it means"]
    na = table.replace("1.00", "n/a") + "\n— = not run.\n"
    assert markdown_problems(na, own=False) == ["shows n/a without saying what it means"]
    assert markdown_problems(na + "Certificate n/a: `a` records none.\n", own=False) == []


def _dry_run(tmp_path: Path, files: list[Path]) -> set[tuple[str, str | None]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.yaml").write_text((REPO / "config.yaml").read_text())
    proc = snakemake(tmp_path, "full", "-n", "--configfile", *map(str, files[1:]))
    return _jobs(proc.stdout + proc.stderr)


def pytest_generate_tests(metafunc):  # noqa: D103 (the finished rehearsals under --rehearsal DIR)
    if "rehearsed" in metafunc.fixturenames:
        root = metafunc.config.getoption("rehearsal")
        names = [p.name for p in sorted(Path(root).iterdir()) if p.name in PAPER_CONFIGS] if root else []
        # a DIR without a rehearsal fails (it was asked for), no DIR skips
        asked = [Path(root) / n for n in names or ["(no rehearsal here)"]] if root else [None]
        metafunc.parametrize("rehearsed", asked)


def test_a_finished_rehearsal_wrote_every_output(rehearsed, tmp_path):
    """Under --rehearsal DIR (.ci/run): every file of target full, no empty cell in any paper table, every figure,
    every table marked; the jobs it ran are the real config's dry-run DAG, plus the tune's final runs (after its
    checkpoint) and the rehearsal's data and weights."""
    if rehearsed is None:
        pytest.skip("no finished rehearsal given (pytest --rehearsal DIR, after `intact rehearse`)")
    assert rehearsed.is_dir(), f"{rehearsed.parent} holds no rehearsal of {', '.join(PAPER_CONFIGS)}"
    name = rehearsed.name
    assert check_outputs(rehearsed, rehearsal_config(name)) == []
    figures = {p.name for p in (rehearsed / "results/figures/paper").iterdir()}
    assert {f"{f}_{name}.{e}" for f in ("aa_evolution", "sensitivity", "certificate", "hypercube", "feat_gate")
            for e in ("png", "pdf")} <= figures
    ran = _jobs((rehearsed / "rehearsal.log").read_text())
    real = _dry_run(tmp_path, config_files(REPO, name)[:2])
    plan = Plan(load_config(*map(str, config_files(REPO, name)[:2]), check_files=False))
    names = {m for runs in (plan.declared_runs(), plan.tune_runs()) for methods in runs.values() for m in methods}
    assert {m for _, m in real if m} == names            # the real dry run: every declared run, every search point
    # a rule a dry run cannot list: its data and weights, and what follows the tune's checkpoint
    assert {r for r, _ in ran} - {r for r, _ in real} <= REHEARSAL_RULES | AFTER_TUNE_CHOICE
    assert real <= ran, sorted(real - ran)[:10]           # every job of the real DAG ran in the rehearsal
    after = {(r, m) for r, m in ran - real if r not in REHEARSAL_RULES}
    chosen = {m for r, m in after if r == "train_task"}
    assert {r for r, _ in after} <= AFTER_TUNE_CHOICE, after
    assert all("run.eval_split" not in m for m in chosen)
