"""Plugins run only when named (issue 43): an installed plugin that no config names is never imported - not by a
command, a dry run or a job - so it changes no built-in result and costs nothing; a run that uses one records it
(distribution, version, digest of its files) and is hashed with it, so a changed plugin reruns its runs.
Each plugin is a dist-info folder and a module in a temporary directory put on the path (tests/test_plugins.py)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, python_in, snakemake, tiny_config, write_config
from intact.methods.declare import Method
from intact.plugins import loaded_plugins
from intact.registry import Registry
from stored_run import write_run
from test_plugins import GOOD, GOOD_BENCH, add_plugin, env, run_cli


def marking(mark: Path, name: str, extra: str = "") -> str:
    """A plugin's module that writes ``mark`` when it is imported (then runs ``extra``), declaring method ``name``."""
    return f"import pathlib\npathlib.Path({str(mark)!r}).write_text('imported')\n{extra}\n" + GOOD.format(name=name)


def registry(site: Path, monkeypatch) -> Registry:
    monkeypatch.syspath_prepend(str(site))
    return Registry("method", Method, "intact.methods", "METHOD", "intact.methods")


def test_a_plugin_is_listed_and_identified_without_being_imported(tmp_path, monkeypatch):
    mark = tmp_path / "imported"
    add_plugin(tmp_path, "sleepy", {"sleepy": "sleepy_mod:METHOD"}, {"sleepy_mod": marking(mark, "sleepy")})
    reg = registry(tmp_path, monkeypatch)
    assert "sleepy" in list(reg) and reg.declares("sleepy") and reg["coda_p"].name == "coda_p"
    found = reg.plugin("sleepy")
    assert (found.what, found.name, found.distribution, found.version) == ("method", "sleepy", "sleepy", "0.1")
    assert reg.plugin("coda_p") is None and "sleepy" not in reg.loaded()
    assert not mark.exists() and "sleepy_mod" not in sys.modules
    assert reg["sleepy"].name == "sleepy" and mark.exists()       # named: imported, and now loaded
    assert "sleepy" in reg.loaded() and found.record() in loaded_plugins()


def test_a_plugins_identity_is_its_version_and_its_files(tmp_path, monkeypatch):
    add_plugin(tmp_path, "ident", {"ident": "ident_mod:METHOD"}, {"ident_mod": GOOD.format(name="ident")})
    first = registry(tmp_path, monkeypatch).plugin("ident")
    assert registry(tmp_path, monkeypatch).plugin("ident") == first                  # found again: the same
    (tmp_path / "ident_mod.py").write_text((tmp_path / "ident_mod.py").read_text() + "\n# changed\n")
    changed = registry(tmp_path, monkeypatch).plugin("ident")
    assert changed.digest != first.digest and changed.version == first.version
    assert str(changed) == f"method ident: ident 0.1 files {changed.digest}"
    # an installed wheel's RECORD lists its other modules (the implementation's): they count too
    (tmp_path / "ident_impl.py").write_text("class Impl:\n    pass\n")
    record = "ident_mod.py,,\nident_impl.py,,\nident-0.1.dist-info/RECORD,,\n"
    (tmp_path / "ident-0.1.dist-info/RECORD").write_text(record)
    recorded = registry(tmp_path, monkeypatch).plugin("ident")
    assert recorded.digest.startswith("2:") and recorded.digest != changed.digest
    (tmp_path / "ident_impl.py").write_text("class Impl:\n    x = 1\n")
    assert registry(tmp_path, monkeypatch).plugin("ident").digest not in (recorded.digest, changed.digest)
    metadata = tmp_path / "ident-0.1.dist-info/METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.1", "Version: 0.2"))
    assert registry(tmp_path, monkeypatch).plugin("ident").version == "0.2"


def test_an_editable_plugins_identity_covers_its_projects_modules(tmp_path, monkeypatch):
    """An editable install's RECORD lists only its .pth file: the identity reads the project's Python files (its
    implementation in a module of its own too), and a wheel's top_level.txt modules where it has no RECORD."""
    import json

    project, site = tmp_path / "project", tmp_path / "site"
    project.mkdir()
    add_plugin(site, "edit", {"edit": "edit_mod:METHOD"}, {})
    (project / "edit_mod.py").write_text(GOOD.format(name="edit"))
    (project / "edit_impl.py").write_text("class Impl:\n    pass\n")
    (project / ".venv").mkdir()
    (project / ".venv/big.py").write_text("x = 1\n")
    info = site / "edit-0.1.dist-info"
    (info / "direct_url.json").write_text(json.dumps({"url": project.as_uri(), "dir_info": {"editable": True}}))
    (site / "__editable__.edit-0.1.pth").write_text(f"{project}\n")
    (info / "RECORD").write_text("__editable__.edit-0.1.pth,,\nedit-0.1.dist-info/RECORD,,\n")
    monkeypatch.syspath_prepend(str(project))
    first = registry(site, monkeypatch).plugin("edit")
    assert first.digest.startswith("3:")                  # the .pth, edit_mod.py, edit_impl.py: not .venv's
    (project / "edit_impl.py").write_text("class Impl:\n    scale = 0.0\n")
    assert registry(site, monkeypatch).plugin("edit").digest != first.digest
    # a distribution without RECORD whose top_level.txt names its implementation's module
    add_plugin(tmp_path / "site2", "tops", {"tops": "tops_mod:METHOD"},
               {"tops_mod": GOOD.format(name="tops"), "tops_impl": "class Impl:\n    pass\n"})
    (tmp_path / "site2/tops-0.1.dist-info/top_level.txt").write_text("tops_mod\ntops_impl\n")
    before = registry(tmp_path / "site2", monkeypatch).plugin("tops")
    (tmp_path / "site2/tops_impl.py").write_text("class Impl:\n    x = 2\n")
    assert before.digest.startswith("2:") and registry(tmp_path / "site2", monkeypatch).plugin("tops") != before


def test_a_cluster_jobs_check_of_the_config_imports_no_method_plugin(tmp_path, monkeypatch):
    """A cluster job parses the Snakefile again (validate_config(check_runs=False)): the config names the plugin, its
    workflow checked it; this job loads only its own run's plugins."""
    import intact.config
    import intact.schema

    mark = tmp_path / "imported"
    add_plugin(tmp_path, "named", {"named": "named_mod:METHOD"}, {"named_mod": marking(mark, "named")})
    reg = registry(tmp_path, monkeypatch)
    monkeypatch.setattr(intact.config, "METHODS", reg)
    monkeypatch.setattr(intact.schema, "METHODS", reg)
    cfg = tiny_config(methods=["coda_p", "named"])
    cfg["methods"]["named"] = {"weight": 2.0}
    intact.config.validate_config(cfg, check_files=False, check_runs=False)
    assert not mark.exists()
    intact.schema.check_schema(cfg)                             # the workflow's own process: checked, so loaded
    assert mark.exists() and "named" in reg.loaded()
    cfg["methods"]["named"] = {"weight": -1.0}
    with pytest.raises(intact.config.ConfigError, match="methods.named.weight"):
        intact.schema.check_schema(cfg)


@pytest.mark.slow
def test_a_cluster_job_imports_no_benchmark_plugin_it_does_not_use(tmp_path):
    """The config declares a benchmark of a plugin type: the workflow's process imports it (it checks the config and
    picks each benchmark's prepare rule), a cluster job's process - started as an executor starts it, ``--mode remote
    --target-jobs ... --allowed-rules ...`` - that prepares another benchmark does not."""
    site, mark, work = tmp_path / "site", tmp_path / "imported", tmp_path / "w"
    add_plugin(site, "marked", {"marked": "marked_mod:BENCHMARK"},
               {"marked_mod": f"import pathlib\npathlib.Path({str(mark)!r}).write_text('imported')\n"
                              + GOOD_BENCH.format(name="marked")}, "intact.benchmarks")
    cfg = tiny_config(methods=["coda_p"])
    cfg["benchmarks"]["plug"] = {"type": "marked", "backbone": "vit_digits"}
    write_config(work, cfg)
    job = ("--target-jobs", "prepare_data:benchmark=digits", "--allowed-rules", "prepare_data", "--mode", "remote",
           "--force-use-threads")
    proc = snakemake(work, *job, env=env(site))
    assert "Finished jobid: 0 (Rule: prepare_data)" in proc.stdout + proc.stderr and not mark.exists()
    assert (work / "results/data/digits/manifest.json").is_file()
    snakemake(work, "-n", env=env(site))          # the workflow's own process: the test can see an import
    assert mark.exists()


def test_a_job_refuses_a_run_resolved_with_other_plugins():
    """A plugin changed between the workflow's resolving a run and its job: the job refuses it (its record would carry
    a hash of other code)."""
    from intact.config import ConfigError, resolve_run, run_from_dict

    cfg = tiny_config()
    data = resolve_run(cfg, "digits", "coda_p", 0).to_dict()
    assert "plugins" not in data and run_from_dict(data).plugins == ()
    with pytest.raises(ConfigError, match=r"run 'coda_p' was resolved with plugins \['method coda_p: x 1 files "
                                          r"1:ab'\]; installed now: \[\]: run snakemake again"):
        run_from_dict({**data, "plugins": ["method coda_p: x 1 files 1:ab"]})


def test_a_run_records_its_plugins_in_mlflow_tags(tmp_path):
    from intact.tracking.record import build_payload, read_run_folder

    plugin = {"what": "method", "name": "good_plugin", "distribution": "goodplug", "version": "0.1", "digest": "1:ab"}
    folder = write_run(tmp_path / "run", [[0.5]], method="good_plugin",
                       provenance={"host": "test", "plugins": [plugin]})
    tags = build_payload(read_run_folder(folder)).tags
    assert tags["intact.plugins.good_plugin"] == "method good_plugin: goodplug 0.1 files 1:ab"


@pytest.mark.slow
def test_a_plugin_no_config_names_is_never_imported(tmp_path):
    """Its import sleeps: a command, a dry run and a config that names another plugin never import it."""
    site, mark = tmp_path / "site", tmp_path / "imported"
    add_plugin(site, "sleepy", {"sleepy": "sleepy_mod:METHOD"},
               {"sleepy_mod": marking(mark, "sleepy", "import time\ntime.sleep(1)")})
    add_plugin(site, "other", {"other": "other_mod:METHOD"}, {"other_mod": GOOD.format(name="other")})
    assert run_cli(site, "validate", "config.yaml").returncode == 0
    assert run_cli(site, "runs", "config.yaml").returncode == 0
    write_config(tmp_path / "w", tiny_config(methods=["coda_p", "coda_p+intact", "other"]))
    assert run_cli(site, "validate", str(tmp_path / "w/config.yaml")).returncode == 0
    assert "train_task" in snakemake(tmp_path / "w", "-n", env=env(site)).stdout
    assert not mark.exists()
    write_config(tmp_path / "named", tiny_config(methods=["coda_p", "sleepy"]))    # the test can see an import
    assert run_cli(site, "validate", str(tmp_path / "named/config.yaml")).returncode == 0 and mark.exists()


@pytest.mark.slow
def test_a_changed_plugin_changes_its_runs_hashes_and_no_builtin_runs(tmp_path):
    site = tmp_path / "site"
    add_plugin(site, "changing", {"changing": "changing_mod:METHOD"}, {"changing_mod": GOOD.format(name="changing")})
    cfg = tmp_path / "config.yaml"
    write_config(tmp_path, tiny_config(methods=["coda_p+intact", "changing", "changing@methods.changing.weight=2"]))
    code = (f"from intact.config import load_config, resolve_run; cfg = load_config({str(cfg)!r}, check_files=False); "
            "import json; print(json.dumps({m: [resolve_run(cfg, 'digits', m, 0).hash(), "
            "resolve_run(cfg, 'digits', m, 0).plugins] for m in cfg['run']['methods']}))")
    first = json.loads(python_in(env(site), code))
    assert first["coda_p+intact"][1] == [] and first["changing"][1] == first["changing@methods.changing.weight=2"][1]
    assert first["changing"][1][0].startswith("method changing: changing 0.1 files 1:")
    (site / "changing_mod.py").write_text((site / "changing_mod.py").read_text() + "\nX = 1\n")
    code_changed = json.loads(python_in(env(site), code))
    metadata = site / "changing-0.1.dist-info/METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.1", "Version: 0.2"))
    version_changed = json.loads(python_in(env(site), code))
    for now in (code_changed, version_changed):
        assert now["coda_p+intact"] == first["coda_p+intact"]
        assert all(now[m][0] != first[m][0] for m in ("changing", "changing@methods.changing.weight=2"))
    assert code_changed["changing"][0] != version_changed["changing"][0]
    assert "changing 0.2 files" in version_changed["changing"][1][0]


#: a plugin that no config names and that, imported, makes every label 0 (a run at chance, under its own hash)
POISON = textwrap.dedent('''
    import torch
    import torch.nn.functional as F

    _real = F.cross_entropy

    def cross_entropy(input, target, *args, **kwargs):
        return _real(input, torch.zeros_like(target), *args, **kwargs)

    F.cross_entropy = cross_entropy
''')

#: the regression run of coda_p+intact (tests/regression_run.py) in a fresh process: R, tensor digests, plugins
REGRESSION = ("import json, sys; from pathlib import Path; sys.path.insert(0, {tests!r}); import regression_run as r; "
              "r.METHODS = ['coda_p+intact']; out = r.compute(Path({work!r}))['runs']['coda_p+intact']; "
              "train = json.loads((Path({work!r}) / 'coda_p+intact/task0/train.json').read_text()); "
              "print(json.dumps({{'R': out['R'], 'tensors': out['tensors'], "
              "'plugins': train['provenance']['plugins']}}))")


@pytest.mark.slow
def test_an_unnamed_plugin_that_patches_torch_leaves_a_builtin_run_bit_identical(tmp_path):
    site, mark = tmp_path / "site", tmp_path / "imported"
    add_plugin(site, "poison", {"poison": "poison_mod:METHOD"}, {"poison_mod": marking(mark, "poison", POISON)})
    runs = {}
    for name, environment in (("with", env(site)), ("without", env(tmp_path / "empty"))):
        code = REGRESSION.format(tests=str(REPO / "tests"), work=str(tmp_path / name))
        runs[name] = json.loads(python_in(environment, code))
    assert not mark.exists()
    assert runs["with"] == runs["without"] and runs["with"]["plugins"] == []
