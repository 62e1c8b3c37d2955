"""The tune study: declared search spaces, the choice on the validation split (never the test split), and
the chosen point's final runs, as a step of the workflow (intact.tune, workflow/rules/tune.smk)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import snakemake, tiny_config, write_config
from test_workflow import job_counts
from intact.config import ConfigError, resolve_run, validate_config
from intact.plan import Plan
from intact.report.paper import AA_NOTE, FORGETTING_NOTE
from intact.settings import build_dataclass
from intact.settings.studies import RandomSearch
from intact.tune import Search, expand_tune, grid_points, random_points, select

GRID = {"lambda_feat": [0.1, 30.0], "lambda_intdrift": [1e-3]}


def tune_config(**spec) -> dict:
    """The tiny config cut to two tasks, with a tune study of two points and two selection seeds."""
    cfg = tiny_config()
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise"]
    cfg["tracking"]["enabled"] = False
    cfg["studies"] = {"tune": {"benchmarks": ["digits"], "seeds": [0], "selection_seeds": [0, 1], "tie": "first",
                               "searches": [{"run": "coda_p+intact", "baseline": "coda_p", "grid": dict(GRID)}],
                               **spec}}
    return cfg


# ---- declarations ----------------------------------------------------------------------------------------

def test_search_points_are_named_runs_on_the_validation_split():
    cfg = tune_config()
    validate_config(cfg)
    study = expand_tune(cfg)
    s = study.search("coda_p+intact")
    assert s.val_names == ["coda_p+intact@lambda_feat=0.1,lambda_intdrift=1e-3,run.eval_split=val",
                           "coda_p+intact@lambda_feat=30,lambda_intdrift=1e-3,run.eval_split=val"]
    assert s.test_names[1] == "coda_p+intact@lambda_feat=30,lambda_intdrift=1e-3"
    val, test = (resolve_run(cfg, "digits", n, 0) for n in (s.val_names[1], s.test_names[1]))
    assert (val.eval_split, test.eval_split) == ("val", "test") and val.intact == test.intact
    assert val.intact.lambda_feat == 30.0 and val.hash() != test.hash()
    runs = Plan(cfg).tune_runs()["digits"]
    assert runs == {**{n: (0, 1) for n in s.val_names}, "coda_p": (0,)}


def test_an_intact_search_is_compared_with_its_baseline_unless_it_declares_another():
    """The search's baseline defaults to the one pairing rule of every table (intact.naming.baseline)."""
    cfg = tune_config(searches=[{"run": "coda_p+intact@optim.epochs=2", "grid": GRID},
                                {"run": "ewc", "grid": {"methods.ewc.lambda_ewc": [1.0]}},
                                {"run": "l2p+intact", "baseline": None, "grid": GRID}])
    validate_config(cfg)
    assert [s.baseline for s in expand_tune(cfg).searches] == ["coda_p@optim.epochs=2", None, None]


@pytest.mark.parametrize("both", [True, False])
def test_a_search_declares_a_grid_or_random_points_not_both_nor_neither(both):
    points = {"points": 2, "space": {"methods.ewc.lambda_ewc": {"uniform": [1, 10]}}}
    entry = {"run": "ewc", "random": points if both else None, **({"grid": GRID} if both else {})}
    with pytest.raises(ConfigError, match=f"run 'ewc' declares {'both' if both else 'neither'} of 'grid' and 'random'"):
        validate_config(tune_config(searches=[entry]))


def random_search(**spec) -> RandomSearch:
    return build_dataclass(RandomSearch, spec, "random")


def test_any_setting_can_be_searched_and_random_points_are_seeded():
    assert grid_points({"a": [1, 2], "b": [3]}) == [(("a", 1), ("b", 3)), (("a", 2), ("b", 3))]
    spec = {"points": 5, "seed": 3,
            "space": {"methods.ewc.lambda_ewc": {"log_uniform": [1, 1000]}, "optim.epochs": {"choice": [1, 2]}}}
    points = random_points(random_search(**spec))
    assert points == random_points(random_search(**spec)) and len(set(points)) == 5
    assert points != random_points(random_search(**{**spec, "seed": 4}))
    unseeded = {k: v for k, v in spec.items() if k != "seed"}  # the declared default seed, 0
    assert random_points(random_search(**unseeded)) == random_points(random_search(**unseeded, seed=0)) != points
    assert all(1 <= dict(p)["methods.ewc.lambda_ewc"] <= 1000 and dict(p)["optim.epochs"] in (1, 2) for p in points)
    cfg = tune_config(searches=[{"run": "ewc", "baseline": "finetune", "random": spec}])
    validate_config(cfg)
    name = expand_tune(cfg).searches[0].val_names[0]
    run = resolve_run(cfg, "digits", name, 0)
    assert run.settings.lambda_ewc == dict(points[0])["methods.ewc.lambda_ewc"] and run.eval_split == "val"


def test_a_bad_declaration_stops_at_start_up():
    for spec, fragment in (({"selection_seeds": [0]}, "selection_seeds"), ({"tie": "best"}, "tie"),
                           ({"searches": [{"run": "coda_p+intact", "grid": {"nonsense": [1]}}]}, "nonsense"),
                           ({"searches": [{"run": "s_prompts+intact", "grid": {"lambda_feat": [1]}}]}, "s_prompts")):
        with pytest.raises(ConfigError, match=fragment):
            validate_config(tune_config(**spec))
    with pytest.raises(ConfigError, match="run.eval_split"):
        resolve_run(tiny_config(), "digits", "coda_p@run.eval_split=train", 0)


@pytest.mark.parametrize("change, fragment", [
    # before 2026-12-01 these validated; each made runs other than their names and records say
    (lambda c: c["run"].update(eval_split="val"),       # the final runs and baselines were scored on validation
     "'run.eval_split' = 'val': the tune study's final runs and baselines run under run.eval_split"),
    (lambda c: c["studies"]["tune"]["searches"][0]["grid"].update(lambda_intdrift=[0.1234567]),   # trained 0.123457
     "lambda_intdrift = 0.1234567 is spelled 0.123457 in its run's name, another number"),
    (lambda c: c["studies"]["tune"].update(searches=[{"run": "coda_p+intact", "baseline": "coda_p", "random": {
        "points": 2, "seed": 0, "space": {"lambda_feat": {"choice": [3, "3"]}}}}]),
     "two of its points are one run, 'coda_p+intact@lambda_feat=3,run.eval_split=val'"),
    # a derived baseline lacks the searched setting: InTAct's gain mixed with that of the setting's tuning
    (lambda c: c["studies"]["tune"].update(searches=[{"run": "coda_p+intact", "grid": {"optim.epochs": [1, 2]}}]),
     "point 'coda_p+intact@optim.epochs=1' sets settings outside InTAct that its derived baseline 'coda_p' lacks"),
    (lambda c: c["studies"].update(sensitivity={"method": "coda_p+intact",
                                                "grid": {"lambda_feat": [0.1, 0.30000000000000004]}}),
     "'studies.sensitivity.grid.lambda_feat[1]' = 0.30000000000000004: spelled 0.3 in its run's name"),
])
def test_a_tune_whose_runs_would_not_be_what_their_names_say_is_refused(change, fragment):
    cfg = tune_config()
    change(cfg)
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        validate_config(cfg)


def test_a_final_runs_tracking_waits_for_its_choice():
    """The tracking of a search point's test-split run reads its search's choice (tags, artifact): the choice is an
    input of it, so a new choice logs the run again; not of a run that the default run or a study declares too."""
    cfg = tune_config()
    cfg["run"]["methods"] = ["coda_p", "coda_p+intact@lambda_feat=0.1,lambda_intdrift=1e-3"]
    validate_config(cfg)
    finals = Plan(cfg).tune_finals
    assert finals == {("digits", "coda_p+intact@lambda_feat=30,lambda_intdrift=1e-3"):
                      "results/tune/digits/coda_p+intact/choice.json"}


def test_a_searched_null_and_an_intact_dotted_key_keep_their_meaning():
    """``null`` was spelled ``None`` in a point's name (read back as the text 'None'); ``intact.<key>`` in a name
    was taken for a setting outside InTAct, so its run's baseline kept it (and no table paired the two)."""
    from intact.naming import baseline
    from intact.tune import format_setting

    cfg = tune_config(searches=[{"run": "coda_p+intact", "baseline": "coda_p",
                                 "grid": {"optim.test_resize": [None], "intact.lambda_feat": [3]}}])
    validate_config(cfg)
    name = expand_tune(cfg).searches[0].val_names[0]
    assert name == "coda_p+intact@optim.test_resize=null,intact.lambda_feat=3,run.eval_split=val"
    assert resolve_run(cfg, "digits", name, 0).optim.test_resize is None and format_setting(None) == "null"
    assert baseline("coda_p+intact@intact.lambda_feat=3,optim.epochs=2") == "coda_p@optim.epochs=2"
    assert all(0.1 <= dict(p)["x"] <= 0.149 for p in random_points(random_search(
        points=5, seed=1, space={"x": {"uniform": [0.1, 0.149]}})))   # rounding to 2 digits stepped past 0.149


def _metrics(search: Search, aa: list[list[float]], forgetting: list[float], split: str = "val") -> dict:
    return {(n, s): {"aa": aa[i][j], "forgetting_max": forgetting[i], "eval_split": split}
            for i, n in enumerate(search.val_names) for j, s in enumerate((0, 1))}


def test_the_choice_is_the_best_mean_validation_aa_with_the_declared_tie_rule():
    s = Search("m+intact", "m", tuple(grid_points({"lambda_feat": [1.0, 2.0, 3.0]})))
    metrics = _metrics(s, [[50, 52], [49, 55], [52, 50]], [10, 20, 5])
    first = select(s, metrics, (0, 1), tie="first", tolerance=0.0)
    assert first["chosen"]["index"] == 1 and first["chosen"]["val_aa_mean"] == 52.0
    # within 1 point of the best: points 0 and 2 tie with 1; the rules break it differently
    assert select(s, metrics, (0, 1), tie="first", tolerance=1.0)["chosen"]["index"] == 0
    assert select(s, metrics, (0, 1), tie="min_forgetting", tolerance=1.0)["chosen"]["index"] == 2
    with pytest.raises(ValueError, match="validation-split records only"):
        select(s, _metrics(s, [[50, 52], [49, 55], [52, 50]], [10, 20, 5], split="test"), (0, 1), tie="first",
               tolerance=0.0)


def test_the_choice_says_how_decisive_it_is():
    """Issue 32 item 7: each point's validation AA with its spread over the selection seeds, the chosen point's
    lead over the runner-up, and whether the lead exceeds the spread (hand-computed below)."""
    s = Search("m+intact", "m", tuple(grid_points({"lambda_feat": [1.0, 2.0, 3.0]})))
    clear = select(s, _metrics(s, [[60, 62], [50, 51], [40, 44]], [0, 0, 0]), (0, 1), tie="first", tolerance=0.0)
    d = clear["decisiveness"]
    assert d["runner_up"]["index"] == 1 and d["lead"] == pytest.approx(10.5) and d["decisive"] is True
    assert d["spread"] == pytest.approx(2 ** 0.5) and d["better_seeds"] == 2 and not d["identical_tie"]
    # paired differences 10 and 11: mean 10.5, sd 0.7071, t(0.975, 1) = 12.7062 -> 10.5 +- 6.353
    assert d["lead_interval"] == pytest.approx([10.5 - 6.3531, 10.5 + 6.3531], abs=1e-3)
    close = select(s, _metrics(s, [[60, 50], [58, 51], [40, 44]], [0, 0, 0]), (0, 1), tie="first", tolerance=0.0)
    assert close["decisiveness"]["lead"] == pytest.approx(0.5) and close["decisiveness"]["decisive"] is False
    assert close["points"][0]["val_aa_sd"] == pytest.approx(50 ** 0.5)


def test_equal_means_in_another_seed_order_tie_and_the_verdict_names_the_tie():
    """Before 2026-12-01 the means were plain sums: 70.1, 60.2, 50.3 gave 60.20000000000001 in one order and
    60.199999999999996 in the other, so ``min_forgetting`` was never asked and point 0 (forgetting 20) won; and a
    point picked inside the tolerance was called "not decisive: lead -0.40" over a runner-up that beat it."""
    from intact.report.tune import how_decisive

    s = Search("m+intact", "m", tuple(grid_points({"lambda_feat": [1.0, 2.0]})))
    metrics = {(s.val_names[i], k): {"aa": a, "forgetting_max": f, "eval_split": "val"}
               for i, (aas, f) in {0: ([70.1, 60.2, 50.3], 20.0), 1: ([50.3, 60.2, 70.1], 5.0)}.items()
               for k, a in enumerate(aas)}
    choice = select(s, metrics, (0, 1, 2), tie="min_forgetting", tolerance=0.0)
    assert choice["tied"] == [0, 1] and choice["chosen"]["index"] == 1
    assert how_decisive(choice)[0] == "tie within tolerance 0 with point(s) 0; the tie rule (min_forgetting) picked"
    within = select(s, _metrics(s, [[70.4, 70.4], [70.0, 70.0]], [10, 5]), (0, 1), tie="min_forgetting",
                    tolerance=0.5)
    assert within["chosen"]["index"] == 1
    assert how_decisive(within)[0].startswith("tie within tolerance 0.5 with point(s) 0;")
    nan = _metrics(s, [[float("nan"), 70.0], [70.0, 70.0]], [0, 0])
    with pytest.raises(ValueError, match="non-finite validation AA"):
        select(s, nan, (0, 1), tie="first", tolerance=0.0)


def test_identical_runs_are_a_tie_not_a_preference():
    """Two points whose runs are the same on every selection seed (lambda_feat 0 under either L_Feat gate) are
    recorded as identical; choosing between them is the tie rule's, and the record says so."""
    s = Search("m+intact", "m", tuple(grid_points({"lambda_feat": [0.0, 3.0], "feat_gate": ["a", "b"]})))
    metrics = _metrics(s, [[70, 72], [70, 72], [60, 61], [65, 60]], [0, 0, 0, 0])
    same = {(n, k): ("twin" if i < 2 else f"{i}-{k}") for i, n in enumerate(s.val_names) for k in (0, 1)}
    choice = select(s, metrics, (0, 1), tie="first", tolerance=0.0, fingerprints=same)
    assert choice["identical"] == [[0, 1]]
    assert choice["chosen"]["index"] == 0
    assert choice["chosen"]["identical_to"] == [1]
    d = choice["decisiveness"]
    assert d["identical_tie"] is True and d["runner_up"]["index"] == 3   # the runner-up is not the chosen's twin
    # without fingerprints (records from before): nothing is called identical
    assert select(s, metrics, (0, 1), tie="first", tolerance=0.0)["identical"] == []


def test_an_edited_search_record_never_makes_the_choice(tmp_path):
    """The choice reads each point through intact.results.read_run: a valid-JSON edit of a point's metrics.json
    (aa -> 1.0, issue 33) or a truncated R.csv is refused naming the file, never chosen from."""
    from intact.io import ArtifactError
    from intact.tune import choose
    from stored_run import write_run

    cfg = tune_config()
    s = expand_tune(cfg).search("coda_p+intact")
    paths = []
    for name, aa in zip(s.val_names, (60.0, 50.0)):                 # point 0 is the better one
        for seed in (0, 1):
            run = write_run(tmp_path / f"results/runs/digits/{name}/seed{seed}",
                            [[aa + 10, aa + seed], [5.0, aa + seed]],
                            method=name, seed=seed, split="val")
            paths.append(run / "metrics.json")
    assert choose(expand_tune(cfg), "digits", "coda_p+intact", paths)["chosen"]["index"] == 0
    edited = paths[0]                                               # point 0, seed 0: its AA edited to 1.0
    edited.write_text(json.dumps({**json.loads(edited.read_text()), "aa": 1.0}))
    with pytest.raises(ArtifactError, match=f"{re.escape(str(edited))}.*aa = 1.0.*--forcerun {re.escape(str(edited))}"):
        choose(expand_tune(cfg), "digits", "coda_p+intact", paths)
    write_run(edited.parent, [[70.0, 60.0], [5.0, 60.0]], method=s.val_names[0], split="val")   # redone
    assert choose(expand_tune(cfg), "digits", "coda_p+intact", paths)["chosen"]["index"] == 0
    r_csv = paths[3].with_name("R.csv")                             # point 1, seed 1: R.csv truncated
    r_csv.write_bytes(r_csv.read_bytes()[:20])
    with pytest.raises(ArtifactError, match=f"{re.escape(str(r_csv))} is damaged.*--forcerun {re.escape(str(r_csv))}"):
        choose(expand_tune(cfg), "digits", "coda_p+intact", paths)


def test_an_edited_choice_is_refused_by_every_reader(tmp_path):
    """The choice record decides which runs are the final ones, and the tune report and a final run's tracking
    read it: before 2026-11-30 a hand edit of its chosen point was trained, reported and logged. It is sealed now
    (tune_select writes it with intact.io.write_record) and read through intact.tune.read_choice only."""
    from intact.io import ArtifactError, write_record
    from intact.tracking.record import tune_choice
    from intact.tune import choose, read_choice
    from stored_run import write_run

    cfg = tune_config()
    s = expand_tune(cfg).search("coda_p+intact")
    paths = [write_run(tmp_path / f"results/runs/digits/{name}/seed{seed}", [[aa, aa], [5.0, aa]], method=name,
                       seed=seed, split="val") / "metrics.json"
             for name, aa in zip(s.val_names, (60.0, 50.0)) for seed in (0, 1)]
    path = tmp_path / "results/tune/digits/coda_p+intact/choice.json"
    written = write_record(path, choose(expand_tune(cfg), "digits", "coda_p+intact", paths))
    assert read_choice(path) == written and written["chosen"]["final_name"] == s.test_names[0]
    final = write_run(tmp_path / f"results/runs/digits/{s.test_names[0]}/seed0", [[70.0, 60.0], [5.0, 60.0]],
                      method=s.test_names[0], split="test")
    assert tune_choice(final, json.loads((final / "metrics.json").read_text()))["path"] == path
    edited = {**written, "chosen": {**written["chosen"], "final_name": s.test_names[1], "index": 1}}
    path.write_text(json.dumps(edited, indent=2) + "\n")
    metrics = json.loads((final / "metrics.json").read_text())
    for read in (lambda: read_choice(path), lambda: tune_choice(final, metrics)):
        with pytest.raises(ArtifactError, match=rf"{re.escape(str(path))} is damaged or foreign: its content does not "
                           r"match its record_sha256 \(edited after its job wrote it\).*--forcerun"):
            read()


def test_an_edited_eval_or_truncated_hypercube_never_makes_the_choice(tmp_path):
    """Issue 43: a valid-JSON edit of a point's last eval.json (which flipped the choice and was called decisive),
    its last task's truncated hypercube, or records of another config than the point's now: the choice names the
    file in one line with the --forcerun that redoes it, and chooses nothing."""
    from intact.io import ArtifactError
    from intact.tune import choose
    from stored_run import write_run

    cfg = tune_config()
    s = expand_tune(cfg).search("coda_p+intact")
    paths, hashes = [], {}
    for name, aa in zip(s.val_names, (60.0, 50.0)):                 # point 0 is the better one
        for seed in (0, 1):
            folder = str(tmp_path / f"results/runs/digits/{name}/seed{seed}")
            hashes[folder] = resolve_run(cfg, "digits", name, seed).hash()
            write_run(Path(folder), [[aa + 10, aa + seed], [5.0, aa + seed]], method=name, seed=seed,
                      split="val", config_hash=hashes[folder])
            paths.append(f"{folder}/metrics.json")
    assert choose(expand_tune(cfg), "digits", "coda_p+intact", paths, hashes)["chosen"]["index"] == 0
    point = tmp_path / f"results/runs/digits/{s.val_names[1]}/seed0"  # the edit would make point 1 the choice
    for name, damage in (("task1/eval.json", _raise_accuracy), ("task1/hypercube.safetensors", _halve)):
        saved = (point / name).read_bytes()
        damage(point / name)
        with pytest.raises(ArtifactError) as err:
            choose(expand_tune(cfg), "digits", "coda_p+intact", paths, hashes)
        msg = str(err.value)
        assert msg.startswith(f"{point / name} is damaged") and f"--forcerun {point / name}`" in msg, msg
        assert "\n" not in msg
        (point / name).write_bytes(saved)
    assert choose(expand_tune(cfg), "digits", "coda_p+intact", paths, hashes)["chosen"]["index"] == 0
    other = {**hashes, str(point): "0123456789ab"}                  # the point's config changed since it ran
    with pytest.raises(ArtifactError, match=r"task0/train.json is damaged or foreign: it records config_hash = .*, "
                                            r"the run's config says '0123456789ab'"):
        choose(expand_tune(cfg), "digits", "coda_p+intact", paths, other)


def _raise_accuracy(path):
    rec = json.loads(path.read_text())
    rec["accuracy"] = [a + 30.0 for a in rec["accuracy"]]
    path.write_text(json.dumps(rec, indent=2))


def _halve(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_the_report_pairs_the_choice_with_its_baseline_seed_by_seed(tmp_path):
    """Chosen − baseline per seed on the test split, its mean, Student's t 95 % interval and the seeds better."""
    from intact.report.tune import write_tune_report
    from intact.results import StoredResults, StoredRun

    s = Search("m+intact", "m", tuple(grid_points({"lambda_feat": [1.0, 2.0]})))
    choice = select(s, _metrics(s, [[50, 52], [49, 55]], [10, 20]), (0, 1), tie="first", tolerance=0.0)
    choice["benchmark"] = "digits"
    evals = lambda aa: tuple({"task": t, "accuracy": [aa, aa]} for t in range(2))  # noqa: E731  (diag = aa)
    runs = [StoredRun("digits", m, seed, {"aa": aa, "forgetting_max": 1.0, "eval_split": "test"}, (), evals(aa))
            for m, aas in ((s.test_names[1], [53.0, 52.5, 58.0]),
                           ("m", [50.0, 52.0, 54.0])) for seed, aa in enumerate(aas)]
    out = {k: tmp_path / f"t.{k}" for k in ("csv", "md", "search", "paired")}
    table = write_tune_report([choice], StoredResults(runs), [0, 1, 2], out, "digits")
    row = table.iloc[0]
    half = 4.303 * 3.25 ** 0.5 / 3 ** 0.5                       # d = 3, 0.5, 4 (tests/test_metrics.py)
    assert (row["delta_aa_mean"], row["better_seeds"]) == (2.5, 3)
    assert (row["delta_aa_ci_low"], row["delta_aa_ci_high"]) == pytest.approx((2.5 - half, 2.5 + half), abs=2e-3)
    md = out["md"].read_text()
    assert "+3.00 / +0.50 / +4.00 | +2.50 | [-1.98, +6.98] | 3 of 3" in md and "Student's t" in md
    assert AA_NOTE in md and FORGETTING_NOTE in md   # which AA and which forgetting (its Δ forgetting column)
    assert pd.read_csv(out["paired"])["delta_aa"].tolist() == [3.0, 0.5, 4.0]


# ---- the workflow ----------------------------------------------------------------------------------------

def test_tune_dag_dry_run_lists_the_searches_and_the_checkpoint(tmp_path):
    cfg = tune_config()
    write_config(tmp_path, cfg)
    counts = job_counts(snakemake(tmp_path, "study_tune", "-n", "--quiet", "rules").stdout)
    # before the choice: 2 points x 2 selection seeds on validation, and the baseline over the final seeds
    assert counts["tune_select"] == 1 and counts["collect_run"] == 2 * 2 + 1 and counts["train_task"] == 2 * 5


def _corrupt_test_split(data_file) -> None:
    """Random test pixels and shuffled test labels in the prepared digits data (validation is train data)."""
    from intact.io import load_tensors, save_tensors

    t = dict(load_tensors(data_file))
    g = torch.Generator().manual_seed(0)
    for k in list(t):
        if k.endswith("test_x"):
            t[k] = torch.rand(t[k].shape, generator=g)
    t["test_y"] = t["test_y"][torch.randperm(len(t["test_y"]), generator=g)]
    save_tensors(data_file, t)


@pytest.mark.slow
def test_tune_study_chooses_on_validation_and_runs_the_choice_on_test(prepared_digits, tmp_path):
    cfg = tune_config()
    prepared_digits(cfg, tmp_path)  # the session's two prepared digits domains and backbone
    snakemake(tmp_path, "study_tune", timeout=2400)  # a cap for a loaded shared machine
    res = tmp_path / "results"
    choice = json.loads((res / "tune/digits/coda_p+intact/choice.json").read_text())
    s = expand_tune(cfg).search("coda_p+intact")
    means = [np.mean([json.loads((res / f"runs/digits/{n}/seed{k}/metrics.json").read_text())["aa"] for k in (0, 1)])
             for n in s.val_names]
    best = int(np.argmax(means))  # ties: the first, as np.argmax
    assert choice["chosen"]["final_name"] == s.test_names[best]
    assert choice["chosen"]["val_aa_mean"] == pytest.approx(means[best])
    final = json.loads((res / f"runs/digits/{s.test_names[best]}/seed0/metrics.json").read_text())
    assert final["eval_split"] == "test"
    table = pd.read_csv(res / "tables/digits/study_tune.csv")
    assert list(table["chosen"]) == [s.test_names[best]] and list(table["baseline"]) == ["coda_p"]
    assert "`coda_p+intact`" in (res / "tables/digits/study_tune.md").read_text()
    # the final run's MLflow view carries the choice (tags) and its record (an artifact)
    from intact.tracking import build_payload, read_run_folder

    folder = read_run_folder(res / f"runs/digits/{s.test_names[best]}/seed0")
    tags = build_payload(folder).tags
    assert tags["intact.tune.run"] == "coda_p+intact" and tags["intact.tune.chosen"] == s.test_names[best]
    assert json.loads(tags["intact.tune.settings"]) == dict(s.points[best])
    assert "tune/coda_p+intact/choice.json" in folder.files
    assert read_run_folder(res / "runs/digits/coda_p/seed0").tune is None
    # a rerun with nothing changed does nothing
    assert "Nothing to be done" in snakemake(tmp_path, "-n", "study_tune").stdout
    # the choice records its baseline and final seeds too, which its report reads: changing one rewrites the
    # choice (then its report, after the checkpoint) and trains nothing (before 2026-12-01: nothing to be done)
    tuned = copy.deepcopy(cfg)
    tuned["studies"]["tune"]["searches"][0]["baseline"] = None
    write_config(tmp_path, tuned)
    counts = job_counts(snakemake(tmp_path, "study_tune", "-n", "--quiet", "rules").stdout)
    assert (counts.get("tune_select"), counts.get("train_task")) == (1, None), counts
    write_config(tmp_path, cfg)
    # a hand edit of the choice is refused before any run follows it (the final runs' names come from it)
    choice_path = res / "tune/digits/coda_p+intact/choice.json"
    kept, st = choice_path.read_bytes(), choice_path.stat()
    choice_path.write_text(json.dumps({**choice, "chosen": {**choice["chosen"], "final_name": s.test_names[1 - best]}}))
    proc = snakemake(tmp_path, "-n", "study_tune", check=False)
    assert proc.returncode != 0 and "does not match its record_sha256" in proc.stdout + proc.stderr
    choice_path.write_bytes(kept)
    os.utime(choice_path, ns=(st.st_atime_ns, st.st_mtime_ns))

    # no test number reaches the choice: corrupt the test split, redo every search point, same choice
    val_aa = {n: [json.loads((res / f"runs/digits/{n}/seed{k}/metrics.json").read_text())["aa"] for k in (0, 1)]
              for n in s.val_names}
    _corrupt_test_split(res / "data/digits/data.safetensors")
    for n in s.val_names:
        shutil.rmtree(res / f"runs/digits/{n}")
    (res / "tune/digits/coda_p+intact/choice.json").unlink()  # (an existing target would not be redone)
    counts = job_counts(snakemake(tmp_path, "study_tune", "-n", "--quiet", "rules").stdout)
    assert counts["train_task"] == 2 * 2 * 2 and counts["tune_select"] == 1  # deleted points rerun, nothing else
    snakemake(tmp_path, "results/tune/digits/coda_p+intact/choice.json", timeout=2400)  # targets: relative to -d
    again = json.loads((res / "tune/digits/coda_p+intact/choice.json").read_text())
    assert again["chosen"] == choice["chosen"] and again["points"] == choice["points"]
    assert val_aa == {n: [json.loads((res / f"runs/digits/{n}/seed{k}/metrics.json").read_text())["aa"] for k in (0, 1)]
                      for n in s.val_names}
    # ... while a test number does change: the chosen point's final run, redone on the corrupted test split
    before = final["aa"]
    shutil.rmtree(res / f"runs/digits/{s.test_names[best]}")
    snakemake(tmp_path, f"results/runs/digits/{s.test_names[best]}/seed0/metrics.json", timeout=2400)
    after = json.loads((res / f"runs/digits/{s.test_names[best]}/seed0/metrics.json").read_text())["aa"]
    assert after < before - 20 and after < 25  # shuffled labels: about chance (10 %)


# ---- the image benchmarks' validation part -------------------------------------------------------------

from test_image_benchmarks import bench_cfg, configs, prepared, tree  # noqa: E402,F401  (module fixtures)


@pytest.mark.parametrize("name", ["imagenet_r", "imagenet_c", "domainnet", "imagenet_mix"])
def test_image_validation_part_is_a_seeded_stratified_cut_of_the_train_list(name, prepared, tree):
    from intact.data import open_benchmark

    cfg = bench_cfg(name, **configs(tree)[name], val_fraction=0.5)
    bench = open_benchmark(prepared[name])
    bench.use_settings(cfg)
    for t in range(bench.num_tasks):
        full, test = bench.train_set(t), bench.eval_set(t)
        rest, val = bench.train_set(t, "val"), bench.eval_set(t, "val")
        # both halves are rows of the train array (never the test array), disjoint, and cover it
        assert rest.x is full.x and val.x is full.x and test.x is not full.x
        rows_rest, rows_val = set(rest.rows.tolist()), set(val.rows.tolist())
        assert not rows_rest & rows_val and rows_rest | rows_val == set(range(len(full)))
        # stratified: half of each class's train images (2 per class here), and every class keeps one to train on
        assert sorted(val.labels.tolist()) == sorted(set(full.labels.tolist()))
        assert rest.augment and not val.augment
        # deterministic: a fresh open draws the same part; another val_seed draws another one somewhere
        again = open_benchmark(prepared[name])
        again.use_settings(cfg)
        assert np.array_equal(again.eval_set(t, "val").rows, val.rows)
    other = open_benchmark(prepared[name])
    other.use_settings(bench_cfg(name, **configs(tree)[name], val_fraction=0.5, val_seed=7))
    assert any(not np.array_equal(other.eval_set(t, "val").rows,
                                  bench.eval_set(t, "val").rows) for t in range(bench.num_tasks))


def test_validation_settings_leave_existing_image_runs_and_preparation_unchanged(tree):
    from intact.data.image_config import prepare_settings
    from intact.settings import recorded

    cfg = bench_cfg("imagenet_r", **configs(tree)["imagenet_r"])
    assert "val_fraction" not in prepare_settings(cfg) and "val_seed" not in prepare_settings(cfg)
    plain = {f: getattr(cfg, f) for f in ("val_fraction", "val_seed")}
    assert plain == {"val_fraction": 0.2, "val_seed": 0}
    # the hash rule: keys declared later are left out of a run's recorded form while at their defaults
    assert "val_fraction" not in recorded(cfg) and "val_seed" not in recorded(cfg)
    assert recorded(bench_cfg("imagenet_r", **configs(tree)["imagenet_r"], val_seed=3))["val_seed"] == 3
