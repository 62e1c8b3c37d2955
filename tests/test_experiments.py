"""The paper's non-prompt experiments: the toy (Fig. 2) and the MLP drift experiment, shrunk to seconds."""

from __future__ import annotations

import copy
import gzip
import json

import numpy as np
import pytest
import torch

from conftest import REPO, snakemake, write_config
from intact.config import validate_config
from intact.experiments.drift import read_idx, run_drift, split_tasks
from intact.settings.experiments import DriftConfig, experiment_settings
from intact.experiments.drift_report import study_drift
from intact.models.networks import build_network
from intact.experiments.toy import study_toy
from intact.layering import load_file


def _config() -> dict:
    cfg = load_file(REPO / "config.yaml")
    validate_config(cfg, check_files=False)
    return copy.deepcopy(cfg)


@pytest.mark.slow
def test_toy_intact_keeps_earlier_intervals_while_finetuning_moves_them(tmp_path):
    cfg = _config()
    cfg["experiments"]["toy"].update(steps=300, samples_per_task=100, grid_points=201)
    torch.set_num_threads(1)
    out = study_toy(experiment_settings(cfg, "toy"), tmp_path / "toy.png", tmp_path / "t.csv", tmp_path / "t.md",
                    tmp_path / "s.json")
    assert (tmp_path / "toy.png").stat().st_size > 10_000
    rows = (tmp_path / "t.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 3                         # (after 2: task 1), (after 3: tasks 1, 2) per method
    assert out["finetune_max_drift"] > 0.05               # fine-tuning does move the earlier fits
    assert out["intact_max_drift"] < 0.2 * out["finetune_max_drift"]
    assert json.loads((tmp_path / "s.json").read_text())["config"]["steps"] == 300


def test_the_drift_r_table_shows_every_entry_and_the_sample_std():
    """Before 2026-12-01 R.md left the entries of a task before it was trained blank, with no note, and its AA std
    was the population std (ddof=0), where every other table gives the sample std."""
    from intact.experiments.drift_report import _r_table
    from intact.metrics import Stat

    table = _r_table(np.array([[90.0, 80.0], [55.0, 95.0]]), "intact", Stat.of([70.0, 80.0]))
    assert [[table.cell(i, str(t)) for t in range(2)] for i in range(2)] == [["90.0", "80.0"], ["55.0", "95.0"]]
    assert table.notes == ["AA 75.0 ± 7.1 (n=2)\n"]


@pytest.mark.slow
def test_drift_study_writes_figure_tables_and_drift_per_hidden_layer(tmp_path):
    cfg = _config()
    cfg["experiments"]["drift"].update(pairs=[[0, 1], [2, 3], [4, 5]], epochs=5, seeds=[0], hidden=[16, 16])
    torch.set_num_threads(1)
    o = tmp_path
    summary = study_drift(experiment_settings(cfg, "drift"), o / "d.png", o / "d.csv", o / "d.md", o / "R.md",
                          o / "s.json", progress=False)
    assert (o / "d.png").stat().st_size > 10_000
    assert set(summary) >= {"finetune", "lwf", "intact"}
    for m in ("finetune", "lwf", "intact"):
        R = np.array(summary[m]["R_mean"])
        assert R.shape == (3, 3) and np.isfinite(R).all()
        assert all(v > 0 for v in summary[m]["final_drift"].values())
    assert (np.diag(np.array(summary["finetune"]["R_mean"])) > 80).all()   # binary tasks, each learned
    assert len((o / "d.csv").read_text().splitlines()) == 1 + 3 * 2 * 2   # methods x layers x (tasks 2, 3)
    assert "after task 3" in (o / "d.md").read_text() and "### InTAct" in (o / "R.md").read_text()


@pytest.mark.slow
def test_drift_of_an_untouched_model_is_zero_and_labels_are_binary():
    cfg = experiment_settings(_config(), "drift")
    cfg = DriftConfig(**{**cfg.__dict__, "pairs": ((0, 1), (2, 3)), "epochs": 1, "lr": 1e-12, "hidden": (8, 8)})
    tasks = split_tasks(cfg)
    assert all(set(t["y"].tolist()) == {0, 1} for t in tasks)
    r = run_drift(cfg, tasks, "finetune", 0)
    assert r["drift"]["fc1"][0, 1] < 1e-6                 # (almost) no step: (almost) no drift


def write_mnist(folder, parts=("train", "t10k")) -> None:
    """Random MNIST IDX files (gzipped; 40 training and 20 test images, labels 0-9 in turn) in ``folder``."""
    g = np.random.default_rng(0)
    for prefix, n in (("train", 40), ("t10k", 20))[:len(parts)]:
        images = g.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = np.arange(n, dtype=np.uint8) % 10
        for kind, arr in (("images-idx3-ubyte", images), ("labels-idx1-ubyte", labels)):
            header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
            with gzip.open(folder / f"{prefix}-{kind}.gz", "wb") as f:
                f.write(header + arr.tobytes())


@pytest.mark.slow
def test_drift_reads_mnist_idx_files(tmp_path):
    write_mnist(tmp_path)
    assert read_idx(tmp_path / "train-images-idx3-ubyte.gz").shape == (40, 28, 28)
    cfg = experiment_settings(_config(), "drift")
    cfg = DriftConfig(**{**cfg.__dict__, "mnist_path": str(tmp_path), "max_per_task": 6})
    tasks = split_tasks(cfg)
    assert len(tasks) == 5 and tasks[0]["x"].shape == (6, 784) and tasks[0]["x_test"].shape == (4, 784)
    assert float(tasks[0]["x"].max()) <= 1.0


def test_networks_are_built_by_name():
    assert build_network("mlp", (1, 8, 8), (16,), 10)(torch.rand(2, 1, 8, 8)).shape == (2, 10)
    cnn = build_network("cnn_bn", (1, 8, 8), (4, 8), 10)
    assert cnn(torch.rand(2, 1, 8, 8)).shape == (2, 10) and hasattr(cnn, "bn1")
    with pytest.raises(ValueError, match="expected one of"):
        build_network("resnet", (1, 8, 8), (4,), 10)


def test_experiment_targets_dry_run(tmp_path):
    write_config(tmp_path, _config())
    out = snakemake(tmp_path, "-n", "study_toy", "study_drift").stdout
    assert "study_toy" in out and "study_drift" in out


def test_the_declared_digit_counts_are_scikit_learns():
    from sklearn.datasets import load_digits

    from intact.data.digits import CLASSES, DIGITS
    from intact.settings.experiments import DIGIT_COUNTS

    assert tuple(np.bincount(load_digits().target)) == DIGIT_COUNTS and (DIGITS, CLASSES) == (1797, 10)


@pytest.mark.parametrize("experiment, setting, fragment", [
    ("toy", {"segments": [[1.0, -1.0], [1.0, 3.0]]}, "'experiments.toy.segments[0]': [1.0, -1.0] is not an interval"),
    ("toy", {"segments": [[-1.0, 1.0], [2.0, 2.0]]}, "'experiments.toy.segments[1]': [2.0, 2.0] is not an interval"),
    ("drift", {"pairs": [[0, 1], [3, 3]]}, "'experiments.drift.pairs[1]': [3, 3]: a task tells two different digits"),
    ("drift", {"test_fraction": 0.999}, "splits the 360 images of digits 0 and 1 into 360 test and 0 training"),
])
def test_an_experiment_setting_its_job_cannot_run_is_refused_at_validation(experiment, setting, fragment):
    """Each passed validation before 2026-11-30: the toy then fit an empty interval, the drift a one-class task, or
    its job failed on scikit-learn's split."""
    cfg = load_file(REPO / "config.yaml")
    cfg["experiments"][experiment] = setting
    with pytest.raises(ValueError, match="config: key") as err:
        validate_config(cfg, check_files=False)
    assert fragment in str(err.value), str(err.value)


def test_the_drift_split_is_refused_exactly_where_scikit_learn_refuses_it():
    """At each task's boundaries (1 and 2 images on a side) and over a grid, with and without ``max_per_task``:
    the check refuses ``test_fraction`` exactly where :func:`split_tasks` fails."""
    from intact.settings.experiments import DIGIT_COUNTS, drift_problems

    cases = [(f, m) for f in (1e-4, 0.003, 0.006, 0.01, 0.3, 0.99, 0.994, 0.997, 0.999) for m in (None, 40)]
    for a, b in DriftConfig().pairs:
        n = DIGIT_COUNTS[a] + DIGIT_COUNTS[b]
        cases += [((t - 0.5) / n, None) for t in (1, 2, n - 2, n - 1)]
    refused = 0
    for fraction, most in cases:
        cfg = DriftConfig(test_fraction=fraction, max_per_task=most)
        try:
            split_tasks(cfg, 0)
            failed = False
        except ValueError:
            failed = True
        assert failed == any(k == "test_fraction" for k, _ in drift_problems(cfg)), (fraction, most)
        refused += failed
    assert refused >= 10, refused


def test_a_missing_mnist_folder_or_file_is_named_before_the_drift_job(tmp_path, monkeypatch):
    """Before 2026-11-30 only the study_drift job found them missing, after the workflow had started; now
    ``intact validate --target study_drift``, a dry run and a real run's start name them (as weights and data
    roots are named), and ``$VARS`` in ``mnist_path`` expand as in the other paths."""
    from intact.plan import check_target_files
    from intact.settings.experiments import missing_experiment_inputs

    cfg = _config()
    assert missing_experiment_inputs(cfg) == {}   # scikit-learn's digits: nothing to read
    monkeypatch.setenv("MNIST_HOME", str(tmp_path))
    cfg["experiments"]["drift"]["mnist_path"] = "$MNIST_HOME/mnist"
    assert missing_experiment_inputs(cfg) == {"drift": [
        f"key 'experiments.drift.mnist_path': MNIST folder '$MNIST_HOME/mnist' (= '{tmp_path}/mnist') does not "
        "exist"]}
    (tmp_path / "mnist").mkdir()
    write_mnist(tmp_path / "mnist", parts=("train",))
    missing = missing_experiment_inputs(cfg)["drift"]
    assert missing == [f"key 'experiments.drift.mnist_path': no t10k-{k}-ubyte[.gz] under {tmp_path}/mnist"
                       for k in ("images-idx3", "labels-idx1")]
    with pytest.raises(ValueError, match=r"config: key 'experiments.drift.mnist_path': no t10k-images-idx3-ubyte"
                       r"\[.gz\] under .* \(needed by target study_drift\)"):
        check_target_files(cfg, "study_drift", lambda b: False)
    assert check_target_files(cfg, "study_toy", lambda b: False).startswith("target study_toy: checked")
    write_config(tmp_path, cfg)
    dry = snakemake(tmp_path, "-n", "study_drift")
    assert f"intact: MISSING (a real run of study_drift stops before its first job): {missing[0]}" in dry.stderr
    proc = snakemake(tmp_path, "study_drift", check=False)
    assert proc.returncode != 0 and f"config: {missing[0]} (needed by job study_drift" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()
    write_mnist(tmp_path / "mnist")
    assert missing_experiment_inputs(cfg) == {} and "MISSING" not in snakemake(tmp_path, "-n", "study_drift").stderr
