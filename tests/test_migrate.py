"""``intact migrate``: a results tree written by version 0.1, whose compositional_prompt / consistent_prompt runs
are stored under their former names c_prompt / cprompt, renamed to 0.2.0's names (intact.migrate).

The 0.1 run folders here are written by :func:`write_0_1_run` with the shape of a real 0.1 tree (made at 3e6ed78
with ``snakemake all study_integration study_tune`` on a tiny config): per task ``train.json`` (``method``,
``config_hash``, and ``config``: the run's plain form, whose ``method`` and ``base`` are the former names, and whose
hash is ``config_hash``), ``eval.json`` (``method``, ``config_hash``), ``state.safetensors`` and
``hypercube.safetensors`` (metadata ``method``, ``task``, ``config_hash``); per run ``metrics.json`` (``method``,
``config_hash``), ``R.csv`` (task names only) and ``tracking.json`` (``run``, ``run_key``, ``config_hash``); Snakemake's
record of each output under ``.snakemake/metadata`` (the key: the output's path in urlsafe base64; ``params``:
the sorted ``repr`` of each param, the run's plain form for ``train_task``; ``input``, ``log``: sorted paths).
"""

from __future__ import annotations

import ast
import base64
import json
import os
from pathlib import Path

import pytest

from conftest import tiny_config
from intact.cli import main
from intact.config import resolve_run
from intact.hashing import stable_hash
from intact.io import SEAL, load_tensors, save_checkpoint, save_tensors, write_json
from intact.migrate import MigrationRefused, migrate, unmigrated
from intact.migrate.tree import former, renamed

FORMER = {"compositional_prompt": "c_prompt", "consistent_prompt": "cprompt"}


def as_0_1(name: str) -> str:
    """A run name as 0.1 stored it (written out here, not by the code under test)."""
    for new, old in FORMER.items():
        name = name.replace(new, old)
    return name


def record_path(workdir: Path, key: str) -> Path:
    return workdir / ".snakemake/metadata" / base64.urlsafe_b64encode(key.encode()).decode()


def write_0_1_run(workdir: Path, name: str, seed: int = 0, tasks: int = 2) -> dict:
    """Run ``name`` (0.2.0's name) of the tiny config as 0.1 stored it; its records, by file name."""
    import torch

    run = resolve_run(tiny_config(), "digits", name, seed)
    config = {**run.to_dict(), "method": as_0_1(run.method), "base": as_0_1(run.base)}
    old, chash = config["method"], stable_hash(config)
    folder = workdir / "results/runs/digits" / old / f"seed{seed}"
    same = {"benchmark": "digits", "method": old, "seed": seed}
    for t in range(tasks):
        task = folder / f"task{t}"
        write_json(task / "train.json", {**same, "task": t, "task_name": f"d{t}", "config_hash": chash,
                                         "epochs": [{"ce": 1.0}], "seconds": 1.0, "config": config})
        write_json(task / "eval.json", {**same, "task": t, "eval_split": "test", "task_names": ["d0", "d1"],
                                        "accuracy": [50.0, 40.0], "samples": [9, 9], "config_hash": chash})
        meta = {"method": old, "task": str(t), "config_hash": chash}
        save_tensors(task / "state.safetensors", {"w": torch.arange(6.0).reshape(2, 3) + t}, meta)
        save_tensors(task / "hypercube.safetensors", {"fc0.lower": torch.zeros(4)}, meta)
        key = f"results/runs/digits/{old}/seed{seed}/task{t}/state.safetensors"
        inputs = ["results/data/digits/manifest.json"] + ([str(Path(key).parent.parent / "task0/state.safetensors")]
                                                          if t else [])
        record = {"rule": "train_task", "input": sorted(inputs), "params": sorted([repr(config)]),
                  "log": [f"results/logs/train_task/digits/{old}/seed{seed}/task{t}.log"],
                  "record_format_version": 6, "input_checksums": {i: "sha256:x" for i in inputs}}
        record_path(workdir, key).parent.mkdir(parents=True, exist_ok=True)
        record_path(workdir, key).write_text(json.dumps(record))
    write_json(folder / "metrics.json", {**same, "aa": 45.0, "config_hash": chash})
    (folder / "R.csv").write_text("task,d0,d1\nd0,50.0,50.0\nd1,40.0,40.0\n")
    write_json(folder / "tracking.json", {"status": "done", "run": f"digits/{old}/seed{seed}",
                                          "run_key": f"digits/{old}/seed{seed}@{chash}", "config_hash": chash,
                                          "run_id": "abc"})
    log = workdir / f"results/logs/train_task/digits/{old}/seed{seed}/task0.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"training {old}\n")
    return {"folder": folder, "hash": chash, "run": run}


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and modification time."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_run_names_are_renamed_at_their_base_and_in_their_overrides_only():
    assert renamed("c_prompt+intact@methods.c_prompt.top_n=1,run.eval_split=val") == \
        "compositional_prompt+intact@methods.compositional_prompt.top_n=1,run.eval_split=val"
    assert renamed("cprompt@protocol=official") == "consistent_prompt@protocol=official"
    for name in ("coda_p", "c_prompts", "my_c_prompt", "coda_p@methods.c_promptx.a=1", "compositional_prompt"):
        assert renamed(name) == name
    assert former(renamed("cprompt-no_x@methods.cprompt.length=2")) == "cprompt-no_x@methods.cprompt.length=2"


def test_a_0_1_run_is_renamed_with_its_records_and_its_new_hash(tmp_path, capsys):
    name = "compositional_prompt+intact@methods.compositional_prompt.top_n=1"
    old = write_0_1_run(tmp_path, name)
    before = snapshot(old["folder"])
    assert main(["migrate", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "1 run names (1 runs)" in out and "`python -m intact.tracking sync results/`" in out, out
    new = tmp_path / "results/runs/digits" / name / "seed0"
    assert not old["folder"].parent.exists() and new.is_dir()
    after = snapshot(new)
    assert {k: v[1] for k, v in after.items()} == {k: v[1] for k, v in before.items()}   # every mtime kept
    chash = old["run"].hash()                                                           # 0.2.0's hash of the run
    assert chash != old["hash"]
    train = json.loads((new / "task1/train.json").read_text())
    assert (train["method"], train["config_hash"], train["config"]) == (name, chash, old["run"].to_dict())
    for f in ("task0/eval.json", "metrics.json"):
        assert {k: json.loads((new / f).read_text())[k] for k in ("method", "config_hash")} == \
            {"method": name, "config_hash": chash}
    for t in (0, 1):
        expect = {"method": name, "task": str(t), "config_hash": chash}
        tensors = load_tensors(new / f"task{t}/state.safetensors", expect)   # refused if the metadata differed
        assert tensors["w"].tolist() == [[0.0 + t, 1.0 + t, 2.0 + t], [3.0 + t, 4.0 + t, 5.0 + t]]
        load_tensors(new / f"task{t}/hypercube.safetensors", expect)
    assert after["R.csv"] == before["R.csv"]
    marker = json.loads((new / "tracking.json").read_text())
    assert marker["run"] == f"digits/{name}/seed0" and marker["run_key"].endswith(f"@{chash}")
    assert marker["status"] == "pending" and "intact.tracking sync" in marker["error"]
    assert (tmp_path / f"results/logs/train_task/digits/{name}/seed0/task0.log").is_file()
    record = json.loads(record_path(tmp_path, f"results/runs/digits/{name}/seed0/task1/state.safetensors").read_text())
    assert record["params"] == [repr(old["run"].to_dict())]                  # what the job's params are now
    assert record["input"] == sorted(["results/data/digits/manifest.json",
                                      f"results/runs/digits/{name}/seed0/task0/state.safetensors"])
    assert record["log"] == [f"results/logs/train_task/digits/{name}/seed0/task1.log"]
    assert not list((tmp_path / ".snakemake/metadata").glob("*" + base64.urlsafe_b64encode(b"c_prompt").decode()[:6]))
    # run again: nothing to do, nothing changed
    whole = snapshot(tmp_path)
    assert main(["migrate", str(tmp_path / "results")]) == 0
    assert "nothing to migrate" in capsys.readouterr().out and snapshot(tmp_path) == whole


def test_a_query_cache_record_gets_the_params_0_2_gives_the_rule(tmp_path, capsys):
    """0.1 gave ``query_cache`` its backbone as ``dataclasses.asdict`` wrote it (tuples); 0.2.0 gives it the recorded
    form (lists), as every other rule. Its record is rewritten in place, to what Snakemake records now (else every
    cache would rerun, and every run that reads one): the output stays, the other records stay as they were."""
    import dataclasses

    from intact.config import backbone_config
    from intact.settings import recorded

    write_0_1_run(tmp_path, "coda_p")
    backbone = backbone_config(tiny_config(), "vit_digits")
    optim = {"batch_size": 64, "amp": False}
    key, other = "results/cache/digits/vit_digits/query.json", "results/backbones/vit_digits.safetensors"
    for k, rule in ((key, "query_cache"), (other, "pretrain_backbone")):
        record = {"rule": rule, "input": [], "log": [], "record_format_version": 6,
                  "params": sorted([repr(dataclasses.asdict(backbone)), repr(optim)])}
        record_path(tmp_path, k).write_text(json.dumps(record))
    assert "(0.5,)" in record_path(tmp_path, key).read_text()
    before = snapshot(tmp_path / ".snakemake")
    assert main(["migrate", str(tmp_path / "results")]) == 0
    capsys.readouterr()
    after = snapshot(tmp_path / ".snakemake")
    name = record_path(tmp_path, key).name
    assert json.loads(after[f"metadata/{name}"][0])["params"] == sorted([repr(recorded(backbone)), repr(optim)])
    assert after[f"metadata/{name}"][1] == before[f"metadata/{name}"][1]          # its time kept
    for path in set(before) - {f"metadata/{name}"}:
        assert after[path] == before[path], path                                 # the other rule's, the runs'
    assert main(["migrate", str(tmp_path / "results")]) == 0
    assert "nothing to migrate" in capsys.readouterr().out and snapshot(tmp_path / ".snakemake") == after


def test_what_a_migration_would_change_is_found_by_a_listing(tmp_path):
    """What the workflow asks at every start (``unmigrated``): a run or tune folder under a former name, then a
    query cache's record in 0.1's form; nothing once migrated."""
    import dataclasses

    from intact.config import backbone_config

    assert unmigrated(tmp_path) is None
    (tmp_path / "results/cache/digits/vit_digits").mkdir(parents=True)
    (tmp_path / "results/cache/digits/vit_digits/query.json").write_text('{"files": {}, "sha256": {}}')
    assert unmigrated(tmp_path) is None                                       # no Snakemake records beside it
    write_0_1_run(tmp_path, "consistent_prompt")
    assert unmigrated(tmp_path) == ("results/runs/digits/cprompt is stored under 0.1's method name "
                                    "(consistent_prompt now)")
    migrate(tmp_path / "results")
    assert unmigrated(tmp_path) is None
    key = "results/cache/digits/vit_digits/query.json"
    params = [repr(dataclasses.asdict(backbone_config(tiny_config(), "vit_digits")))]
    record_path(tmp_path, key).write_text(json.dumps({"rule": "query_cache", "params": params}))
    assert unmigrated(tmp_path) == f"Snakemake's record of {key} holds 0.1's params"
    migrate(tmp_path / "results")
    assert unmigrated(tmp_path) is None
    record_path(tmp_path, key).write_text(json.dumps({"rule": "query_cache", "params": ["<object at 0x1>"]}))
    assert unmigrated(tmp_path) is None                       # not read: the migration itself names it, refusing
    with pytest.raises(MigrationRefused, match="not a plain value"):
        migrate(tmp_path / "results")


def test_a_dry_run_names_what_it_would_change_and_changes_nothing(tmp_path, capsys):
    write_0_1_run(tmp_path, "compositional_prompt+intact", seed=0)
    write_0_1_run(tmp_path, "compositional_prompt+intact", seed=1)
    whole = snapshot(tmp_path)
    assert main(["migrate", "--dry-run", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "1 run names (2 runs)" in out[0] and "to rename" in out[0] and "to rewrite" in out[0], out
    assert out[1:] == ["  runs/digits/c_prompt+intact -> compositional_prompt+intact",
                       "nothing was changed (--dry-run)"]
    assert snapshot(tmp_path) == whole
    assert main(["migrate", str(tmp_path / "results")]) == 0
    assert capsys.readouterr().out.split(": ", 1)[1].startswith("1 run names (2 runs)")


def test_an_interrupted_migration_is_completed_by_the_next(tmp_path):
    from intact.migrate import apply
    from intact.migrate.snakemake import plan_records
    from intact.migrate.tree import plan_tree

    done, cut = tmp_path / "done", tmp_path / "cut"
    for root in (done, cut):
        write_0_1_run(root, "consistent_prompt", tasks=3)
    migrate(done / "results")
    plan = plan_tree(cut / "results")
    plan_records(plan, cut)
    plan.rewrites = plan.rewrites[:len(plan.rewrites) // 2 + 1]   # stopped half way through the rewrites
    plan.moves = plan.records = []
    apply(plan)
    migrate(cut / "results")
    for part in ("results", ".snakemake"):   # the same bytes (the two trees were written at other times)
        assert {k: v[0] for k, v in snapshot(cut / part).items()} == {k: v[0] for k, v in snapshot(done / part).items()}


def test_a_checkpoint_of_an_interrupted_task_is_renamed_too(tmp_path):
    import torch

    old = write_0_1_run(tmp_path, "compositional_prompt")
    save_checkpoint(old["folder"] / "task1/checkpoint.pt", {"run_hash": old["hash"], "task": 1, "method": "c_prompt",
                                                             "epoch": 0, "state": {"w": torch.ones(2)}})
    migrate(tmp_path / "results")
    ck = torch.load(tmp_path / "results/runs/digits/compositional_prompt/seed0/task1/checkpoint.pt",
                    weights_only=True)
    assert (ck["method"], ck["run_hash"], ck["state"]["w"].tolist()) == ("compositional_prompt",
                                                                         old["run"].hash(), [1.0, 1.0])


def _foreign_file(tmp_path: Path) -> str:
    (tmp_path / "results/runs/digits/c_prompt/seed0/notes.txt").write_text("mine")
    return "results/runs/digits/c_prompt/seed0/notes.txt: not a file the pipeline writes in a run folder"


def _edited_config(tmp_path: Path) -> str:
    path = tmp_path / "results/runs/digits/c_prompt/seed0/task1/train.json"
    path.write_text(path.read_text().replace('"per_task": 3', '"per_task": 4'))
    return "task1/train.json: its config_hash is not the hash of its config"


def _both_names(tmp_path: Path) -> str:
    (tmp_path / "results/runs/digits/compositional_prompt").mkdir()
    return "results/runs/digits/c_prompt: 'compositional_prompt' exists beside it"


def _other_run(tmp_path: Path) -> str:
    path = tmp_path / "results/runs/digits/c_prompt/seed0/task0/eval.json"
    path.write_text(path.read_text().replace('"method": "c_prompt"', '"method": "coda_p"'))
    return "task0/eval.json: it records 'coda_p' with config hash"


def _seal_removed(tmp_path: Path) -> str:
    """A record 0.2 wrote (it holds a state's sha256), edited and its seal dropped: not sealed again as 0.1's."""
    path = tmp_path / "results/runs/digits/c_prompt/seed0/task1/eval.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "state_sha256": None, "accuracy": [99.0, 40.0]}))
    return "task1/eval.json: it holds state_sha256 but no record_sha256: its seal was removed"


def _running(tmp_path: Path) -> str:
    (tmp_path / ".snakemake/locks").mkdir(parents=True)
    (tmp_path / ".snakemake/locks/0.input.lock").write_text("results/x\n")
    return "0.input.lock: a snakemake process works in"


@pytest.mark.parametrize("spoil", [_foreign_file, _edited_config, _both_names, _other_run, _seal_removed, _running])
def test_what_it_does_not_recognise_is_refused_in_one_line_and_nothing_changes(tmp_path, capsys, spoil):
    write_0_1_run(tmp_path, "compositional_prompt")
    fragment = spoil(tmp_path)
    whole = snapshot(tmp_path)
    assert main(["migrate", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and fragment in err and "nothing was changed" in err, err
    assert snapshot(tmp_path) == whole


def test_a_query_cache_listing_gets_the_sha256_of_its_files_keeping_its_time(tmp_path, capsys):
    """A cache written before listings held their files' sha256 (its readers refuse it now): the workflow's start
    names it, the migration adds the digests of the files as they are, and leaves the listing's time (no rerun)."""
    import hashlib

    write_0_1_run(tmp_path, "coda_p")
    cache = tmp_path / "results/cache/digits/vit_digits"
    cache.mkdir(parents=True)
    (cache / "test0.npy").write_bytes(b"q0")
    write_json(cache / "query.json", {"benchmark": "digits", "files": {"test0": [1, 1, 2]}})
    os.utime(cache / "query.json", ns=(1, 10**18))
    assert unmigrated(tmp_path) == "results/cache/digits/vit_digits/query.json lists no sha256 of its files"
    assert main(["migrate", str(tmp_path / "results")]) == 0
    listing = json.loads((cache / "query.json").read_text())
    assert listing["sha256"] == {"test0": hashlib.sha256(b"q0").hexdigest()}
    assert listing["files"] == {"test0": [1, 1, 2]}
    assert (cache / "query.json").stat().st_mtime_ns == 10**18 and unmigrated(tmp_path) is None
    capsys.readouterr()
    assert main(["migrate", str(tmp_path / "results")]) == 0 and "nothing to migrate" in capsys.readouterr().out
    write_json(cache / "query.json", {"benchmark": "digits", "files": {"test0": [1, 1, 2], "test1": [1, 1, 2]}})
    with pytest.raises(MigrationRefused, match="it lists test1.npy, which is missing"):
        migrate(tmp_path / "results")


def test_a_folder_that_is_no_results_tree_is_refused(tmp_path):
    with pytest.raises(MigrationRefused, match="not a results folder"):
        migrate(tmp_path)
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------------------------------
# A whole tree: written by the pipeline, named back to 0.1's form, migrated, then planned and reported


def e2e_config() -> dict:
    """The default run with both renamed methods (an override naming one) and a tune study searching one, on two
    tasks."""
    cfg = tiny_config(methods=["coda_p", "compositional_prompt", "consistent_prompt",
                               "compositional_prompt+intact@methods.compositional_prompt.top_n=1"])
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise"]   # two tasks, prepared as tests/test_tune.py's
    cfg["tracking"]["enabled"] = False
    cfg["studies"] = {"tune": {"benchmarks": ["digits"], "seeds": [0], "selection_seeds": [0, 1], "tie": "first",
                               "searches": [{"run": "compositional_prompt+intact", "baseline": "compositional_prompt",
                                             "grid": {"lambda_feat": [0.0, 3.0]}}]}}
    return cfg


def to_0_1(workdir: Path) -> None:
    """Name a tree the current pipeline wrote back to the form 0.1 stored it in, by plain text replacement (not
    with intact.migrate): the run names in paths, records and Snakemake's records, and each renamed run's config
    hash replaced by the hash of its config under the former names; the records' seals and the tensors' sha256
    taken out, the tensors' metadata in safetensors' own order, and the ``query_cache`` params with tuples, as 0.1
    wrote them. Every rewritten file keeps its time.

    This is a 0.1 tree because 0.1 and 0.2.0 differ in these alone: a run's plain form, records and tensors
    are the same otherwise. Checked by hand on a tree made at 3e6ed78 (``snakemake all study_integration study_tune``
    on a tiny config with both methods, an override and a tune search): its six runs of that config run again at
    0.2.0 and named back by this function give every record of 0.1's (timings and provenance aside), every tensor
    bit for bit, and Snakemake's records of their training outputs (params, inputs, logs) unchanged; only the
    aggregation rules' code inputs differ (the checkout's module files)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    results = workdir / "results"
    hashes = {}
    for path in results.glob("runs/*/*/seed*/task*/train.json"):
        data = json.loads(path.read_text())
        if as_0_1(data["method"]) != data["method"]:
            hashes[data["config_hash"]] = stable_hash(json.loads(as_0_1(json.dumps(data["config"]))))

    def back(text: str) -> str:
        text = as_0_1(text)
        for new, old in hashes.items():
            text = text.replace(new, old)
        return text

    for path in [p for top in ("runs", "tune") for p in (results / top).rglob("*") if p.is_file()]:
        st = path.stat()
        if path.name in ("train.json", "eval.json", "choice.json"):   # 0.1 sealed no record, kept no tensor's sha256
            data = json.loads(back(path.read_text()))
            write_json(path, {k: v for k, v in data.items() if k not in (SEAL, "state_sha256", "hypercube_sha256")})
        elif path.suffix == ".json":
            path.write_text(back(path.read_text()))
        elif path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as f:
                meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
            save_file(tensors, str(path), {k: back(v) for k, v in meta.items()})
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    for top in ("runs", "tune", "logs", "timings"):
        for path in sorted((results / top).rglob("*"), key=lambda p: -len(p.parts)):   # the deepest first
            if as_0_1(path.name) != path.name:
                path.rename(path.with_name(as_0_1(path.name)))
    for base in (workdir / ".snakemake/metadata", workdir / ".snakemake/incomplete"):
        for path in [p for p in base.rglob("*") if p.is_file()]:
            key = base64.urlsafe_b64decode(path.name).decode()
            data = json.loads(path.read_text())
            for field in ("input", "log"):   # paths under results/ only (a code input names a module file)
                if field in data:
                    data[field] = sorted(back(p) if p.startswith("results/") else p for p in data[field])
            if "params" in data:
                data["params"] = sorted(back(p) for p in data["params"])
            if data.get("rule") == "query_cache":   # 0.1 gave it the backbone as dataclasses.asdict does: tuples
                data["params"] = sorted(repr(tuples(ast.literal_eval(p))) for p in data["params"])
            if "input_checksums" in data:
                data["input_checksums"] = {back(k) if k.startswith("results/") else k: v
                                           for k, v in data["input_checksums"].items()}
            path.unlink()
            (base / base64.urlsafe_b64encode(back(key).encode()).decode()).write_text(json.dumps(data))


def tuples(value: object) -> object:
    """Every list in ``value`` (a backbone's params) a tuple, as ``dataclasses.asdict`` kept its tuple fields."""
    if isinstance(value, dict):
        return {k: tuples(v) for k, v in value.items()}
    return tuple(value) if isinstance(value, list) else value


def _files(workdir: Path) -> dict[str, object]:
    """What a results tree and Snakemake's records hold, read: JSON parsed, tensors with their metadata (which
    safetensors writes in no fixed order), everything else as bytes; each with its modification time. Tables and
    figures, and Snakemake's records of them, are left out: a migration leaves them for the workflow to rebuild."""
    def derived(p: Path) -> bool:
        path = base64.urlsafe_b64decode(p.name).decode() if ".snakemake" in p.parts else str(p.relative_to(workdir))
        return path.startswith(("results/tables/", "results/figures/"))

    out: dict[str, object] = {}
    for path in sorted(p for top in ("results", ".snakemake/metadata") for p in (workdir / top).rglob("*")
                       if p.is_file() and not derived(p)):
        if path.suffix == ".json" or ".snakemake" in path.parts:
            data = json.loads(path.read_text())
            if isinstance(data, dict):
                data.pop("job_hash", None)
            content: object = data
        elif path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                content = (f.metadata(), {k: f.get_tensor(k).tolist() for k in f.keys()})
        else:
            content = path.read_bytes()
        mtime = path.stat().st_mtime_ns if ".snakemake" not in path.parts else 0
        out[str(path.relative_to(workdir))] = (content, mtime)
    return out


@pytest.fixture(scope="module")
def written(prepared_digits, tmp_path_factory):
    """The pipeline's tree of :func:`e2e_config` (the default run and the tune study)."""
    from conftest import snakemake

    work = prepared_digits(e2e_config(), tmp_path_factory.mktemp("written"))
    snakemake(work, "all", "study_tune")
    return work


@pytest.mark.slow
def test_a_0_1_tree_migrated_is_the_tree_0_2_writes_and_plans_no_training(written, tmp_path):
    """Issue 44: after `intact migrate`, snakemake with the config that wrote the tree plans no training job (the
    runs are up to date, their hashes changed), the tree is the one 0.2.0 writes, and `make reports` gives the
    same tables."""
    import re
    import shutil

    from conftest import REPO, snakemake
    from test_workflow import job_counts

    old = tmp_path / "old"
    shutil.copytree(written, old, symlinks=True)           # copy2: every modification time kept
    shutil.rmtree(old / ".snakemake/locks", ignore_errors=True)
    to_0_1(old)
    assert (old / "results/runs/digits/c_prompt/seed0").is_dir()
    dry = snakemake(old, "-n", "all", "study_tune")
    planned = job_counts(dry.stdout)
    assert planned.get("train_task") and planned.get("query_cache")   # 0.1's names and 0.1's cache params: rerun
    assert "intact: NOT MIGRATED" in dry.stderr and "run `intact migrate results` first" in dry.stderr, dry.stderr
    before = _files(old)
    real = snakemake(old, "all", "study_tune", check=False)            # stopped before its first job
    assert real.returncode != 0 and "run `intact migrate results` first" in real.stderr, real.stderr[-2000:]
    assert _files(old) == before
    out = migrate(old / "results")
    assert out.split(": ", 1)[1].startswith("6 run names (8 runs)"), out   # the default run's 3, the 2 search
    # points on 2 selection seeds, the chosen point
    assert _files(old) == _files(written)
    assert "nothing to migrate" in migrate(old / "results")
    assert job_counts(snakemake(written, "-n", "all", "study_tune").stdout) == {}
    planned = job_counts(snakemake(old, "-n", "all", "study_tune").stdout)   # the reports that name methods only:
    assert planned and all(r.startswith("report_") or r in ("all", "study_tune") for r in planned), planned
    make = (REPO / "Makefile").read_text()
    rules = [r for v in ("REPORT_RULES", "PAPER_RULES") for r in re.search(rf"^{v} := (.*)$", make, re.M)[1].split()]
    defined = set(snakemake(written, "--list-rules").stdout.split())   # (no study but the tune is declared here)
    rules = [r for r in rules if r in defined]
    tables = {}
    for work in (written, old):                             # `make reports`
        proc = snakemake(work, "reports", "--forcerun", *rules, "--allowed-rules", *rules)
        assert "train_task" not in proc.stdout + proc.stderr
        tables[work] = {str(p.relative_to(work)): p.read_bytes() for p in (work / "results/tables").rglob("*")
                        if p.is_file()}
    assert tables[old] == tables[written] and tables[old]
