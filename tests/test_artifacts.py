"""Damaged or foreign artifacts: an error naming the file and the command that redoes it; a checkpoint of
another config or task is never loaded; a full disk fails the job cleanly."""

import json
import re
import shutil
import traceback

import pytest
import torch
from safetensors.torch import save_file

from intact.config import resolve_run
from intact.evaluate import evaluate_task
from intact.io import ArtifactError, load_tensors, save_checkpoint, save_tensors, write_record
from intact.results import collect_run, read_run
from intact.train import Preempted, train_task

METHOD = "coda_p+intact"


@pytest.fixture(scope="module")
def two_tasks(tiny_bench, tmp_path_factory):
    """Tasks 0 and 1 of one run, trained and evaluated once; tests work on copies."""
    out = tmp_path_factory.mktemp("two_tasks")
    run = resolve_run(tiny_bench["config"], "digits", METHOD, 0)
    for t in range(2):
        _train(tiny_bench, run, out, t)
        evaluate_task(run, t, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                      state=out / f"task{t}/state.safetensors", out_path=out / f"task{t}/eval.json", threads=1)
    return out


def _train(bench, run, out, t, **kw):
    return train_task(run, t, manifest=bench["manifest"], backbone_weights=bench["weights"], out_dir=out / f"task{t}",
                      prev_dir=out / f"task{t - 1}" if t else None, threads=1, progress=False, **kw)


def _copy(two_tasks, tmp_path):
    work = tmp_path / "run"
    shutil.copytree(two_tasks, work)
    for f in (work / "task1").iterdir():
        if f.name != "eval.json":
            f.unlink()
    return work


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _relabel(path, **meta):
    """Rewrite a safetensors file with other metadata: a file from another task / method / config."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        old = f.metadata()
    save_file(load_tensors(path), str(path), metadata={**old, **meta})


def _assert_names(err, path, redo="snakemake --forcerun"):
    msg = str(err.value)
    assert str(path) in msg and redo in msg, msg


@pytest.mark.parametrize("name, damage, fragment", [
    ("state.safetensors", _truncate, "not a readable safetensors file"),
    ("hypercube.safetensors", _truncate, "not a readable safetensors file"),
    ("state.safetensors", lambda p: _relabel(p, task="1"), "task = '1'"),
    ("state.safetensors", lambda p: _relabel(p, method="coda_p"), "method = 'coda_p'"),
    ("hypercube.safetensors", lambda p: _relabel(p, config_hash="0123456789ab"), "config_hash = '0123456789ab'"),
])
def test_damaged_or_foreign_previous_task_is_refused_naming_the_file(tiny_bench, two_tasks, tmp_path, name, damage,
                                                                     fragment):
    work = _copy(two_tasks, tmp_path)
    damage(work / "task0" / name)
    run = resolve_run(tiny_bench["config"], "digits", METHOD, 0)
    with pytest.raises(ArtifactError) as err:
        _train(tiny_bench, run, work, 1)
    _assert_names(err, work / "task0" / name)
    assert fragment in str(err.value)
    assert not list((work / "task1").glob("*.safetensors"))


def test_state_of_another_task_is_refused_by_evaluation(tiny_bench, two_tasks, tmp_path):
    work = _copy(two_tasks, tmp_path)
    shutil.copy(work / "task0/state.safetensors", work / "task1/state.safetensors")   # a file in the wrong folder
    run = resolve_run(tiny_bench["config"], "digits", METHOD, 0)
    with pytest.raises(ArtifactError) as err:
        evaluate_task(run, 1, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                      state=work / "task1/state.safetensors", out_path=work / "task1/eval2.json", threads=1)
    _assert_names(err, work / "task1/state.safetensors")
    assert not (work / "task1/eval2.json").exists()


@pytest.mark.parametrize("damage, fragment", [
    (lambda p: p.write_text(p.read_text()[:40]), "not valid JSON"),
    (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "seed": 7})), "seed = 7"),
    (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "task": 0})), "task 0, expected task 1"),
    (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "accuracy": [float("nan")] * 3})), "non-finite"),
    # what evaluation wrote (and sealed) for an empty split before 2026-11-30
    (lambda p: write_record(p, {**{k: v for k, v in json.loads(p.read_text()).items() if k != "record_sha256"},
                                "samples": [20, 0, 20]}), "it evaluated task 1 on no image"),
])
def test_damaged_foreign_or_nonfinite_eval_record_never_reaches_R(two_tasks, tmp_path, damage, fragment):
    work = tmp_path / "run"
    shutil.copytree(two_tasks, work)
    damage(work / "task1/eval.json")
    paths = [work / f"task{t}/{{}}.json" for t in range(2)]
    with pytest.raises(ArtifactError) as err:
        collect_run([str(p).format("eval") for p in paths], [str(p).format("train") for p in paths],
                    work / "R.csv", work / "metrics.json", 10)
    _assert_names(err, work / "task1/eval.json")
    assert fragment in str(err.value), str(err.value)
    assert not (work / "R.csv").exists() and not (work / "metrics.json").exists()


def test_nonfinite_losses_or_metrics_never_reach_a_table(two_tasks, tmp_path):
    work = tmp_path / "run"
    shutil.copytree(two_tasks, work)
    train = work / "task0/train.json"
    rec = json.loads(train.read_text())
    rec["epochs"][0]["var"] = float("nan")                 # a diverged record written by older code
    train.write_text(json.dumps(rec))
    evals, trains = [work / f"task{t}/eval.json" for t in range(2)], [work / f"task{t}/train.json" for t in range(2)]
    with pytest.raises(ArtifactError, match=r"non-finite values \(epochs\[0\]\.var\)"):
        collect_run(evals, trains, work / "R.csv", work / "metrics.json", 10)
    metrics = work / "metrics.json"
    metrics.write_text(json.dumps({"method": METHOD, "seed": 0, "aa": float("nan"),
                                   "aa_evolution": [1.0, float("nan")]}))
    with pytest.raises(ArtifactError) as err:
        read_run(work)                                     # what every table, figure and choice reads
    assert "aa" in str(err.value) and "kept out of every table" in str(err.value)


R3 = [[90.0, 80.0, 70.0], [20.0, 85.0, 60.0], [10.0, 30.0, 75.123456]]


def _edit_json(path, **values):
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}, indent=2))


@pytest.mark.parametrize("name, damage, fragment", [
    ("metrics.json", lambda p: _edit_json(p, aa=1.0), "aa = 1.0, its task records give 68.37"),   # valid JSON
    ("metrics.json", lambda p: _edit_json(p, aa_evolution=[90.0, 82.5, 1.0]), "aa_evolution"),
    ("metrics.json", lambda p: _edit_json(p, method="coda_p+intact"), "method"),
    ("metrics.json", _truncate, "not valid JSON"),
    ("R.csv", _truncate, "R.csv"),
    ("R.csv", lambda p: p.write_text(p.read_text().replace("75.1235", "75.2")), "R[d2, d2] = 75.2"),
    ("R.csv", lambda p: p.write_text("".join(p.read_text().splitlines(True)[:-1])), "tasks"),   # a row lost
    ("R.csv", lambda p: p.write_text(""), "not a readable accuracy matrix"),
    ("R.csv", lambda p: p.unlink(), "missing"),
])
def test_a_derived_record_that_its_task_records_do_not_give_is_refused(tmp_path, name, damage, fragment):
    """R.csv is checked against the tasks' eval.json, metrics.json against what those records give: an edited
    (valid) number, a truncated or lost file is refused in one line naming it and the command that redoes it."""
    from stored_run import write_run

    run = write_run(tmp_path / "results/runs/digits/coda_p/seed0", R3, certificate=float("nan"))
    assert read_run(run).metrics["aa"] == pytest.approx((70 + 60 + 75.123456) / 3)     # as written: accepted
    damage(run / name)
    with pytest.raises(ArtifactError) as err:
        read_run(run)
    _assert_names(err, run / name, f"snakemake --forcerun {run / name}")
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)


def _edit_accuracy(path):
    """A valid-JSON edit of an eval record that keeps its seal (the edit of issue 43 that flipped a tune choice)."""
    rec = json.loads(path.read_text())
    rec["accuracy"][0] += 20.0
    path.write_text(json.dumps(rec, indent=2))


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _unsealed(path, *also):
    """The record without its seal (and ``also``: without those keys too, as 0.1 wrote it)."""
    rec = json.loads(path.read_text())
    for key in ("record_sha256", *also):
        rec.pop(key)
    path.write_text(json.dumps(rec))


@pytest.mark.parametrize("name, damage, fragment", [
    ("task2/eval.json", _edit_accuracy, "does not match its record_sha256"),
    ("task1/eval.json", _edit_accuracy, "does not match its record_sha256"),
    ("task2/train.json", lambda p: _edit_json(p, certificate=0.5), "does not match its record_sha256"),
    ("task1/eval.json", _unsealed, "holds state_sha256 but no record_sha256: its seal was removed"),
    ("task1/eval.json", lambda p: _unsealed(p, "state_sha256"), "written by 0.1, before records were sealed"),
    ("task2/hypercube.safetensors", _truncate, "not a readable safetensors file"),          # the last task's
    ("task2/hypercube.safetensors", _flip_last_byte, "its sha256 is"),
    ("task2/state.safetensors", _flip_last_byte, "its sha256 is"),
    ("task2/state.safetensors", lambda p: shutil.copy(p.parent.parent / "task1/state.safetensors", p),
     "it records task = '1'"),
    ("task1/train.json", lambda p: p.unlink(), "missing"),    # a FileNotFoundError: tracking took it for a server's
    ("task2/eval.json", lambda p: p.unlink(), "missing"),     # trouble, pending on every retry (before 2026-12-01)
])
def test_an_edited_or_truncated_task_file_is_named(tmp_path, name, damage, fragment):
    """Issue 43: every task's eval.json, train.json, state and hypercube - the last task's included - is checked
    (sealed, this run's, the digests its records hold) before R, metrics, a tune choice or MLflow reads it; an
    edited or truncated one is named in one line with the --forcerun that redoes it, and nothing is written."""
    from stored_run import write_run

    run = write_run(tmp_path / "results/runs/digits/coda_p/seed0", R3)
    evals, trains = [run / f"task{t}/eval.json" for t in range(3)], [run / f"task{t}/train.json" for t in range(3)]
    damage(run / name)
    with pytest.raises(ArtifactError, match=re.escape(str(run / name))):
        read_run(run, tensors=True)                       # what the tune choice and MLflow read
    if name.endswith(".json"):
        with pytest.raises(ArtifactError, match=re.escape(str(run / name))):
            read_run(run)                                 # what a table reads: the JSON and CSV files
    for out in ("R.csv", "metrics.json"):
        (run / out).unlink()
    with pytest.raises(ArtifactError) as err:
        collect_run(evals, trains, run / "R.csv", run / "metrics.json", 10)
    _assert_names(err, run / name, f"snakemake --forcerun {run / name}")
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert not (run / "R.csv").exists() and not (run / "metrics.json").exists()


@pytest.mark.parametrize("key", ["backbone_sha256", "data_sha256"])
def test_a_run_whose_tasks_trained_on_other_weights_or_data_is_refused(tmp_path, key):
    """A run's settings (its hash) name the weights file and the data, not their bytes: before 2026-12-01 a run
    whose later tasks were redone after the weights or the data changed (the earlier ones kept by their mtimes)
    reached R and every table, mixing the two. Every task must record task 0's backbone and data digests."""
    from stored_run import rewrite_task, write_run

    run = write_run(tmp_path / "results/runs/digits/coda_p/seed0", R3)
    rewrite_task(run / "task2", train={key: "0" * 64})
    with pytest.raises(ArtifactError) as err:
        read_run(run)
    assert (f"{run / 'task2/train.json'}: its task trained on other " in str(err.value)
            and f"({key} differs from {run / 'task0/train.json'}'s), so the run mixes two; redo the whole run: "
                f"redo it with `snakemake --forcerun {run / 'task0/train.json'}`" in str(err.value)), str(err.value)


def test_a_record_of_another_config_or_state_is_refused(tmp_path):
    """The records must carry the config hash the run's config gives now, and each eval.json the sha256 of the
    state its task trained; a copied results tree (no states, no hypercubes) is read from its records alone."""
    from stored_run import rewrite_task, write_run

    run = write_run(tmp_path / "results/runs/digits/coda_p/seed0", R3, config_hash="0123456789ab")
    assert read_run(run, config_hash="0123456789ab", tensors=True).metrics["config_hash"] == "0123456789ab"
    with pytest.raises(ArtifactError, match=r"task0/train.json is damaged or foreign: it records config_hash = "
                                            r"'0123456789ab', the run's config says 'ba9876543210'"):
        read_run(run, config_hash="ba9876543210")
    other = json.loads((run / "task0/eval.json").read_text())["state_sha256"]
    ev = json.loads((run / "task1/eval.json").read_text())
    write_record(run / "task1/eval.json", {**ev, "state_sha256": other})   # a sealed record of task 0's state
    with pytest.raises(ArtifactError, match=r"task1/eval.json is damaged or foreign: it records the state .*not the "
                                            r"state trained"):
        read_run(run)
    rewrite_task(run / "task1")                                            # as written: the state's digest back
    for f in run.rglob("*.safetensors"):
        f.unlink()
    assert read_run(run, config_hash="0123456789ab", tensors=True).seed == 0


def test_the_same_tensors_and_metadata_give_the_same_bytes(tmp_path):
    """safetensors writes its metadata in a Rust HashMap's order, which changes from call to call; save_tensors
    writes it sorted, so a file's sha256 (what the records keep) is a function of its tensors and metadata. A file
    with one metadata key (the backbone's) keeps safetensors' own bytes, and the tensors read back unchanged."""
    import hashlib

    from safetensors.torch import save

    tensors = {"head.weight": torch.arange(12.0).reshape(3, 4), "e_p": torch.ones(2, dtype=torch.bfloat16)}
    meta = {"method": "coda_p+intact", "task": "2", "config_hash": "0123456789ab"}
    digests = set()
    for i in range(12):
        order = list(meta.items())[i % 3:] + list(meta.items())[: i % 3]
        digests.add(save_tensors(tmp_path / f"{i}.safetensors", tensors, dict(order)))
    files = {(tmp_path / f"{i}.safetensors").read_bytes() for i in range(12)}
    assert len(files) == 1 and digests == {hashlib.sha256(files.pop()).hexdigest()}
    assert b'{"__metadata__":{"config_hash":"0123456789ab","method":"coda_p+intact","task":"2"},' in \
        (tmp_path / "0.safetensors").read_bytes()
    back = load_tensors(tmp_path / "0.safetensors", meta)
    assert all(torch.equal(back[k], v) for k, v in tensors.items())
    save_tensors(tmp_path / "one.safetensors", tensors, {"model": "vit_digits_p8"})
    assert (tmp_path / "one.safetensors").read_bytes() == save(tensors, metadata={"model": "vit_digits_p8"})


def test_a_loaded_tensor_starts_at_the_same_alignment_whatever_the_metadata(tmp_path):
    """A loaded tensor is a copy, 64-byte aligned like any fresh tensor, not a view into the file that starts where
    the header (as long as the run's name) ends: CPU kernels round by alignment (tests/test_training.py)."""
    for n in range(1, 17):
        path = tmp_path / f"{n}.safetensors"
        save_tensors(path, {"fc0.lower": torch.zeros(64), "fc0.upper": torch.ones(64)}, {"method": "m" * n})
        assert {k: v.data_ptr() % 64 for k, v in load_tensors(path).items()} == {"fc0.lower": 0, "fc0.upper": 0}


def test_damaged_manifest_names_the_file(tiny_bench, two_tasks, tmp_path):
    manifest = tmp_path / "data/manifest.json"
    shutil.copytree(tiny_bench["manifest"].parent, manifest.parent)
    _truncate(manifest)
    run = resolve_run(tiny_bench["config"], "digits", METHOD, 0)
    with pytest.raises(ArtifactError) as err:
        train_task(run, 0, manifest=manifest, backbone_weights=tiny_bench["weights"], out_dir=tmp_path / "t0",
                   threads=1, progress=False)
    _assert_names(err, manifest)


def test_checkpoint_of_another_config_or_task_is_never_loaded(tiny_bench, two_tasks, tmp_path, capsys):
    """A checkpoint left by another config (or task) in the task folder is ignored with a message: the task
    trains from its first epoch and ends bit-identical to a clean run."""
    cfg = tiny_bench["config"]
    other = resolve_run(cfg, "digits", f"{METHOD}@lambda_feat=1", 0)
    run = resolve_run(cfg, "digits", METHOD, 0)
    work = tmp_path / "run"
    with pytest.raises(Preempted):
        _train(tiny_bench, other, work, 0, max_steps=3)          # leaves task0/checkpoint.pt of another config
    record = _train(tiny_bench, run, work, 0)
    assert record["resumed_from"] is None
    assert f"ignoring {work / 'task0/checkpoint.pt'}: it belongs to config {other.hash()}" in capsys.readouterr().err
    a, b = load_tensors(work / "task0/state.safetensors"), load_tensors(two_tasks / "task0/state.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    # a task-0 checkpoint found in task 1's folder is not task 1's either
    with pytest.raises(Preempted):
        _train(tiny_bench, run, tmp_path / "x", 0, max_steps=3)
    shutil.copytree(work / "task0", tmp_path / "y/task0")
    (tmp_path / "y/task1").mkdir()
    shutil.copy(tmp_path / "x/task0/checkpoint.pt", tmp_path / "y/task1/checkpoint.pt")
    assert _train(tiny_bench, run, tmp_path / "y", 1)["resumed_from"] is None


def test_damaged_checkpoint_names_the_file_and_says_to_delete_it(tiny_bench, tmp_path):
    run = resolve_run(tiny_bench["config"], "digits", METHOD, 0)
    (tmp_path / "task0").mkdir()
    ckpt = tmp_path / "task0/checkpoint.pt"
    ckpt.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ArtifactError) as err:
        _train(tiny_bench, run, tmp_path, 0)
    _assert_names(err, ckpt, redo="delete")


@pytest.fixture
def tiny_disk(tmp_path):
    """A tmpfs mounted by the test (root only; skipped with a message otherwise); ``resize(bytes)`` remounts it."""
    import subprocess

    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "intact-full-disk-test", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {proc.stderr.strip() or proc.returncode}")
    try:
        yield mnt, lambda size: subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_checkpoint_that_finds_the_disk_full_leaves_no_view_of_its_buffer_in_the_error(tiny_disk):
    """The error of a checkpoint write that found the disk full holds no view of the in-memory buffer in its
    tracebacks (its own or its context's): on CPython 3.12.1 the garbage collector crashed freeing one, so the
    full-disk job below died in a segfault at its next collection."""
    mnt, _ = tiny_disk
    with pytest.raises(OSError, match="no space left on the device") as err:
        save_checkpoint(mnt / "checkpoint.pt", {"w": torch.zeros(10_000)})
    views, exc = [], err.value
    while exc is not None:
        views += [name for frame, _ in traceback.walk_tb(exc.__traceback__) for name, value in frame.f_locals.items()
                  if isinstance(value, memoryview) and type(value.obj).__name__ == "_BytesIOBuffer"]
        exc = exc.__context__
    assert views == [], f"frames of the error still hold views of the buffer: {views}"


def test_full_disk_fails_the_job_cleanly_and_a_rerun_after_freeing_space_finishes(tiny_bench, two_tasks, tmp_path,
                                                                                  tiny_disk):
    """Task 1 writes into a filesystem too small for its files - at its epoch checkpoint, its state, its record:
    each time the job fails with a message naming the file, and leaves no result and no temporary file; with
    space again, the rerun (resuming where it can) ends bit-identical to a run that never hit a full disk."""
    import os

    from intact.io import load_checkpoint

    mnt, resize = tiny_disk
    run = resolve_run(tiny_bench["config"], "digits", METHOD, 0)
    probe = tmp_path / "probe"
    shutil.copytree(two_tasks / "task0", probe / "task0")
    with pytest.raises(Preempted):
        _train(tiny_bench, run, probe, 1, max_steps=1)
    page = os.sysconf("SC_PAGE_SIZE")
    pages = {f: -(-(p.stat().st_size) // page) for f, p in [("ckpt", probe / "task1/checkpoint.pt"),
             *[(n, two_tasks / f"task1/{n}") for n in ("state.safetensors", "hypercube.safetensors", "train.json")]]}
    sizes = [pages["ckpt"] // 2,                                                  # the epoch checkpoint does not fit
             pages["ckpt"] + 1 + pages["state.safetensors"] // 2,                 # the state does not fit
             pages["ckpt"] + pages["state.safetensors"] + pages["hypercube.safetensors"] + 1]   # the record does not
    shutil.copytree(two_tasks / "task0", tmp_path / "prev/task0")
    named = set()
    out = mnt / "task1"
    for size in sizes:
        resize(size * page)
        with pytest.raises(OSError) as err:
            train_task(run, 1, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"], out_dir=out,
                       prev_dir=tmp_path / "prev/task0", threads=1, progress=False)
        msg = str(err.value)
        assert "no space left on the device while writing" in msg and "free some space and rerun" in msg, msg
        named.add(msg.split("while writing ")[1].split(" (")[0].rsplit("/", 1)[1])
        left = {p.name for p in out.iterdir()}
        assert left <= {"checkpoint.pt"}, left                      # no result, no temporary file
        if left:
            load_checkpoint(out / "checkpoint.pt")                   # and what is kept is whole
    print("the full disk stopped writes of:", sorted(named))
    assert {"checkpoint.pt", "state.safetensors"} <= named, named
    resize(4 << 20)
    record = train_task(run, 1, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"], out_dir=out,
                        prev_dir=tmp_path / "prev/task0", threads=1, progress=False)
    assert record["resumed_from"] == {"epoch": 1, "step": 0}
    assert {p.name for p in out.iterdir()} == {"state.safetensors", "hypercube.safetensors", "train.json"}
    a, b = load_tensors(out / "state.safetensors"), load_tensors(two_tasks / "task1/state.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_a_task_with_no_image_to_evaluate_on_stops_evaluation_naming_it(tiny_bench, two_tasks, tmp_path,
                                                                                       monkeypatch):
    """An empty evaluation split (an image benchmark's val_fraction that rounds to no image of any class) gave
    prepared images no batch, so 0 % entered R as a number; a tensor benchmark's gave one empty batch, on which the
    model failed. Both stop now, naming the task, and no eval.json is written."""
    from torch.utils.data import TensorDataset

    from intact.data.impl.digits import DigitsBenchmark

    whole = DigitsBenchmark.eval_set

    def emptied(self, task, eval_split="test"):
        data = whole(self, task, eval_split)
        return TensorDataset(data.tensors[0][:0], data.tensors[1][:0]) if task == 1 else data

    monkeypatch.setattr(DigitsBenchmark, "eval_set", emptied)
    run = resolve_run(tiny_bench["config"], "digits", METHOD, 0)
    with pytest.raises(ValueError, match=r"task 1 \('[a-z]+'\) has no test image to evaluate on"):
        evaluate_task(run, 1, manifest=tiny_bench["manifest"], backbone_weights=tiny_bench["weights"],
                      state=two_tasks / "task1/state.safetensors", out_path=tmp_path / "eval.json", threads=1)
    assert not (tmp_path / "eval.json").exists()


def test_a_written_file_is_readable_as_the_umask_allows(tmp_path):
    """Every record, table and tensor went through mkstemp, whose 0600 os.replace kept: on a cluster's shared
    project folder nobody else could read the results, whatever their umask (before 2026-12-01)."""
    import os

    from intact.io import write_json

    mask = os.umask(0o022)
    os.umask(mask)
    write_json(tmp_path / "r.json", {"a": 1})
    save_tensors(tmp_path / "t.safetensors", {"x": torch.zeros(2)})
    assert {oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()} == {oct(0o666 & ~mask)}
