"""intact.plan (config -> runs -> files) and intact.sources (a script's code inputs, from its imports)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, pythonpath, tiny_config
from intact.paths import RUN_DIR, run_dir
from intact.plan import PAPER_FIGURES, PAPER_TABLES, Plan, each_run, merge_runs
from intact.sources import HOW_JOBS_START, _closure as PARSE, imported_modules, module_file, source_files


def _study_config() -> dict:
    cfg = tiny_config(seeds=[0, 1])
    cfg["studies"] = {"seeds": [0], "main": {"methods": ["coda_p", "ewc"]},
                      "ablation": {"method": "coda_p+intact", "terms": ["var"]},
                      "sensitivity": {"method": "coda_p+intact", "seeds": [2], "grid": {"lambda_var": [1e-3, 1e-2]}}}
    return cfg


def test_runs_of_targets_are_the_union_of_their_parts():
    plan = Plan(_study_config())
    assert plan.default_runs() == {"digits": {"coda_p": (0, 1), "coda_p+intact": (0, 1)}}
    declared = plan.declared_runs()["digits"]
    # a run in two places is one run with the seeds of both
    assert declared["coda_p"] == (0, 1) and declared["ewc"] == (0,) and declared["coda_p+intact"] == (0, 1)
    assert declared["coda_p+intact-no_var"] == (0,) and declared["coda_p+intact@lambda_var=1e-3"] == (2,)
    assert plan.requested_runs([]) == plan.requested_runs(["all"]) == plan.default_runs()
    assert plan.requested_runs(["paper_tables"]) == {} and plan.requested_runs(["results/x.csv"]) == {}
    assert plan.requested_runs(["full"]) == plan.declared_runs()
    assert plan.requested_runs(["study_main"]) == {"digits": {"coda_p": (0,), "ewc": (0,)}}
    assert merge_runs([{"b": {"m": (2,)}},
                       {"b": {"m": (1, 2)}, "c": {"n": (0,)}}]) == {"b": {"m": (1, 2)}, "c": {"n": (0,)}}


def test_a_paper_table_beside_reports_waits_for_the_runs_reports_collects_again():
    """`make reports` forces collect_run on the stored runs of every report it rebuilds (their metrics.json are
    rewritten); a paper table built in the same invocation takes their records as inputs. A run whose report is
    not complete (ewc: the main study lacks its metrics here) is not collected again."""
    plan = Plan(_study_config())
    stored = {f"results/runs/digits/{m}/seed{s}/metrics.json" for m, s in
              [("coda_p", 0), ("coda_p", 1), ("coda_p+intact", 0), ("coda_p+intact", 1), ("coda_p+intact-no_var", 0)]}
    files = plan.recollected(["reports", "paper_tables"], stored.__contains__)
    runs = {f.rsplit("/", 1)[0] for f in files}
    assert {f.rsplit("/", 1)[1] for f in files} == {"metrics.json", "R.csv"}
    assert runs == {f.rsplit("/", 1)[0] for f in stored}            # default run and ablation complete; main not
    assert plan.recollected(["paper_tables"], stored.__contains__) == []


def test_files_of_a_target_against_brute_force():
    """Every run's files, spelled from paths.RUN_DIR by hand here, are exactly what the plan lists."""
    cfg = _study_config()
    plan = Plan(cfg)
    tasks = plan.num_tasks("digits")
    assert tasks == len(cfg["benchmarks"]["digits"]["domains"])
    expected = set()
    for m in ("coda_p", "coda_p+intact"):
        for s in (0, 1):
            d = RUN_DIR.format(benchmark="digits", method=m, seed=s)
            expected |= {f"{d}/R.csv", f"{d}/metrics.json", f"{d}/tracking.json"}
            expected |= {f"{d}/task{t}/{f}" for t in range(tasks)
                         for f in ("state.safetensors", "hypercube.safetensors", "train.json", "eval.json")}
    default = set(plan.default_targets())
    assert {f for f in default if "/runs/" in f} == expected
    assert {f for f in default if "/runs/" not in f} == {
        "results/tables/digits/default_run.csv", "results/tables/digits/default_run.md",
        "results/tables/digits/default_run_paired.csv",
        "results/figures/digits/default_run_aa_evolution.png", "results/figures/digits/domains.png"}
    paper = set(plan.paper_targets())
    assert len(paper) == len(PAPER_TABLES) * 3 + 2 + len(PAPER_FIGURES) * 2
    assert set(plan.all_targets()) == default | paper
    full = set(plan.full_targets())
    assert full >= set(plan.all_targets()) and all(set(plan.study_targets(s)) <= full for s in plan.studies)
    assert "results/figures/digits/study_sensitivity_lambda_var.png" in full
    records = {f for f in expected if f.endswith(("metrics.json", "R.csv", "eval.json", "train.json"))}
    assert set(plan.record_files(plan.default_runs())) == records


def test_tracking_off_lists_no_markers_and_stored_reports_need_every_run():
    cfg = _study_config()
    cfg["tracking"] = {"enabled": False}
    plan = Plan(cfg)
    assert not [f for f in plan.full_targets() if f.endswith("tracking.json")]
    main = {f"{run_dir('digits', m, 0)}/metrics.json" for m in ("coda_p", "ewc")}
    assert plan.stored_reports(lambda f: f in main) == plan.study_reports("main", "digits")
    assert plan.stored_reports(lambda f: f in main - {next(iter(main))}) == []
    everything = plan.stored_reports(lambda f: True)
    assert set(plan.default_reports("digits")) <= set(everything) and len(everything) == len(set(everything))


def test_each_run_walks_every_seed():
    assert list(each_run({"b": {"m": (0, 1)}, "c": {"n": (2,)}})) == [("b", "m", 0), ("b", "m", 1), ("c", "n", 2)]


def test_no_rule_spells_a_run_folder_by_hand():
    """Run folders come from intact.paths (RUN_DIR / RUN_KEY) and intact.plan, never from a literal."""
    offenders = []
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"results/runs|seed\{|/seed\d", line):
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert not offenders, offenders


def test_no_script_reads_the_raw_config():
    """A job reads its settings from its params (Snakemake records them: a change reruns it), never from
    ``snakemake.config``; and the workflow serialises settings one way (``recorded``), not ``asdict``."""
    offenders = []
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow").rglob("*.smk")),
                 *sorted((REPO / "workflow").rglob("*.py"))]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"snakemake\.config|asdict|as_dict\(", line):
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert not offenders, offenders


def test_every_script_reads_its_params_through_the_one_helper():
    """Each adapter's body is ``with job(snakemake) as params:`` (intact.runtime.joblog): its log, and its params
    in their typed forms; none reads ``snakemake.params`` or builds a setting itself."""
    scripts = sorted((REPO / "workflow/scripts").glob("*.py"))
    assert len(scripts) >= 18
    for path in scripts:
        text = path.read_text()
        assert "with job(snakemake) as params:" in text, path.name
        assert not re.search(r"snakemake\.params|log_to|build_dataclass|run_from_dict|benchmark_settings", text), \
            path.name


# --------------------------------------------------------------------------------------------------
# intact.sources


def _loaded_modules(script) -> set[str]:
    """Brute force: the intact modules that importing the script's imports actually loads."""
    imports = "\n".join(line for line in script.read_text().splitlines() if line.startswith(("import ", "from ")))
    code = imports + ("\nimport sys\n"
                      "print('\\n'.join(m.__file__ for n, m in sys.modules.items() if n.split('.')[0] == 'intact'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": pythonpath(REPO / "src")}, timeout=300)
    return set(proc.stdout.split())


@pytest.mark.parametrize("script", ["collect_run.py", "report_main.py", "report_study.py"])
def test_code_inputs_hold_every_module_the_script_loads(script):
    path = REPO / "workflow/scripts" / script
    files = set(source_files(path))
    how_jobs_start = {str(module_file(m)) for m in HOW_JOBS_START}
    loaded = _loaded_modules(path)
    assert loaded - how_jobs_start <= files
    assert all(f.startswith(str(REPO / "src/intact")) for f in files)
    # the script calls intact.runtime.warm.hand_off(), but how its process starts changes no output: not an input
    assert str(module_file("intact.runtime.warm")) in loaded and not files & how_jobs_start


def _new_process(monkeypatch: pytest.MonkeyPatch, parse: bool) -> None:
    """What a new ``snakemake`` process has: no closure in memory; with ``parse`` False, none may be computed."""
    import intact.sources

    PARSE.cache_clear()
    intact.sources._scan.cache_clear()
    monkeypatch.setattr(intact.sources, "_closure", PARSE if parse else lambda *a: pytest.fail("parsed again"))


def test_code_inputs_are_kept_between_processes_until_a_file_changes(tmp_path, monkeypatch):
    """A later process reads a script's list from the cache without parsing anything; a file added to the
    package, a module edited (a new import) or the script edited makes the next one parse again, and it then
    sees the change. A cache that cannot be written changes nothing but the time."""
    import intact.sources

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src, pkg, script = tmp_path / "src", tmp_path / "src/intact", tmp_path / "script.py"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("X = 1\n")
    script.write_text("import intact.a\n")
    listed = lambda: {str(Path(f).relative_to(pkg)) for f in source_files(script, src=src)}  # noqa: E731
    assert listed() == {"__init__.py", "a.py"}
    assert intact.sources.cache_file(src).is_file()
    _new_process(monkeypatch, parse=False)
    assert listed() == {"__init__.py", "a.py"}
    for edit, expected in [
        (lambda: (pkg / "b.py").write_text("Y = 2\n"), {"__init__.py", "a.py"}),           # a file added
        (lambda: (pkg / "a.py").write_text("from intact import b\n"), {"__init__.py", "a.py", "b.py"}),
        (lambda: script.write_text("import intact\n"), {"__init__.py"}),                    # the script edited
    ]:
        edit()
        _new_process(monkeypatch, parse=True)
        assert listed() == expected
        _new_process(monkeypatch, parse=False)
        assert listed() == expected
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))  # no folder can be made under it
    _new_process(monkeypatch, parse=True)
    assert listed() == {"__init__.py"}
    assert not intact.sources.cache_file(src).exists()


def test_code_inputs_follow_new_imports_of_every_kind(tmp_path):
    """A temporary package: absolute, relative, function-level and lazy-registry imports, and a data file
    a module names, all reach the script's list; a sibling data file no module names does not."""
    pkg = tmp_path / "intact"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub/__init__.py").write_text("")
    (pkg / "a.py").write_text("from intact.sub import b\n")
    (pkg / "sub/b.py").write_text("def f():\n    from . import c\n    return c\n")
    (pkg / "sub/c.py").write_text("REG = {'x': 'intact.sub.d:Thing'}\n")
    (pkg / "sub/d.py").write_text("from pathlib import Path\nDATA = Path(__file__).with_name('numbers.yaml')\n")
    (pkg / "sub/numbers.yaml").write_text("1\n")
    (pkg / "sub/unrelated.yaml").write_text("2\n")
    (pkg / "unused.py").write_text("")
    script = tmp_path / "script.py"
    script.write_text("import intact.a\n")
    files = {str(Path(p).relative_to(tmp_path)) for p in source_files(script, src=tmp_path)}
    assert files == {"intact/__init__.py", "intact/a.py", "intact/sub/__init__.py", "intact/sub/b.py",
                     "intact/sub/c.py", "intact/sub/d.py", "intact/sub/numbers.yaml"}
    assert imported_modules(pkg / "sub/b.py", src=tmp_path) == {"intact.sub", "intact.sub.c"}
