"""The identity of every shipped run: tests/data/run_hashes.tsv, recomputed by tools/run_hashes.py.

A run's config hash names its stored results (a changed hash retrains it, and its old results no longer count), so
a change that moves any hash must say so: regenerate the table (``PYTHONPATH=src python tools/run_hashes.py >
tests/data/run_hashes.tsv``) in the commit that changes it, and say why in CHANGELOG.md.
"""

from __future__ import annotations


from conftest import REPO, load_tool
from intact.config import run_from_dict

TABLE = REPO / "tests" / "data" / "run_hashes.tsv"


def test_every_shipped_run_keeps_its_hash():
    tool = load_tool("run_hashes")
    lines = TABLE.read_text().splitlines()
    assert tuple(lines[0].split("\t")) == tool.HEADER
    stored = {tuple(line.split("\t")) for line in lines[1:]}
    assert lines[1:] == sorted(lines[1:]), "the table is kept sorted (regenerate it with the tool)"
    now = set(tool.table(REPO))
    gone, new = sorted(stored - now), sorted(now - stored)
    shown = "\n".join([*(f"- {' '.join(r)}" for r in gone), *(f"+ {' '.join(r)}" for r in new)])
    assert not gone and not new, f"run hashes differ from {TABLE.name} (- stored, + now):\n{shown}"


def test_the_table_covers_every_kind_of_run():
    """Rows for the default run, a study, the tune's search points, final runs and baselines, and every config."""
    rows = [line.split("\t") for line in TABLE.read_text().splitlines()[1:]]
    configs = {r[0] for r in rows}
    assert {"config.yaml", "configs/lambda_search.yaml", "configs/paper/imagenet_r.yaml"} <= configs
    names = {r[2] for r in rows if r[0] == "config.yaml"}
    assert {"coda_p", "coda_p+intact", "coda_p+intact-no_align", "net_lwf"} <= names   # run, ablation, network
    tune = {r[2] for r in rows if r[0] == "config.yaml" and r[1] == "digits_3"}
    assert any(n.endswith(",run.eval_split=val") for n in tune) and "finetune" in tune   # search points, baseline
    assert "ewc@methods.ewc.lambda_ewc=10" in tune                                        # a final run


def test_every_shipped_run_rebuilds_from_its_plain_form():
    """The plain form (``RunConfig.to_dict``: a job's ``params.run``, a record's ``config``) is lossless: what it
    leaves out (a key declared ``later``, at its default) is rebuilt in one place, ``build_dataclass`` from the
    declarations, so every shipped run comes back equal, and writes the same plain form again."""
    tool, checked = load_tool("run_hashes"), 0
    for path in tool.default_paths(REPO):
        for (benchmark, method), run in tool.resolved_runs(path, REPO).items():
            back = run_from_dict(run.to_dict())
            assert back == run and back.to_dict() == run.to_dict(), (path, benchmark, method)
            checked += 1
    assert checked == len(TABLE.read_text().splitlines()) - 1
