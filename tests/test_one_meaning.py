"""One word, one meaning (issue 44): one table writer and one figure writer (every table and figure of the reports,
the experiments, the tune study and MLflow's run view is written by :func:`intact.report.render.write_table` /
:func:`intact.report.plots.write_figure`, atomically), one record type per run, and a plugin that still says
``stored_query`` refused."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO
from intact.removed import removed_uses
from intact.report.render import DASH_NOTE, Column, Table, tex, to_markdown, write_table

#: the one place each kind of file is written from (R.csv is a run's own results file, not a report table)
WRITERS = {r"\.savefig\(": {"report/plots.py"}, r"\.to_csv\(": {"report/render.py", "results.py"}}


@pytest.mark.parametrize("call", sorted(WRITERS))
def test_tables_and_figures_are_written_in_one_place(call):
    src = REPO / "src" / "intact"
    found = {str(p.relative_to(src)) for p in src.rglob("*.py") if re.search(call, p.read_text())}
    assert found == WRITERS[call]


def test_a_figure_is_written_atomically_and_without_timestamps(tmp_path):
    from intact.report.plots import plt, write_figure

    def draw() -> plt.Figure:
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [1, 0])
        return fig

    write_figure(draw(), [tmp_path / "a.pdf", tmp_path / "a.png"])
    first = (tmp_path / "a.pdf").read_bytes()
    write_figure(draw(), [tmp_path / "a.pdf"])
    assert (tmp_path / "a.pdf").read_bytes() == first            # no CreationDate: the same figure, the same bytes
    assert b"Software" not in (tmp_path / "a.png").read_bytes()
    with pytest.raises(ValueError):
        write_figure(draw(), [tmp_path / "b.nosuchformat"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pdf", "a.png"]   # nothing half-written left behind


def test_the_mlflow_run_figure_is_a_run_folder_drawn_by_the_one_writer(tmp_path):
    from intact.results import StoredRun
    from intact.tracking import RunFolder, run_figure

    evals = tuple({"task": t, "task_names": ["a", "b"], "accuracy": [90.0, 80.0 + t]} for t in range(2))
    run = RunFolder("digits", "coda_p", 0, {"aa": 85.0, "aa_evolution": [90.0, 85.0], "config_hash": "h"},
                    ({"config_hash": "h"},) * 2, evals, tmp_path)
    assert isinstance(run, StoredRun) and (run.run_key, run.num_tasks) == ("digits/coda_p/seed0@h", 2)
    run_figure(run, tmp_path / "run_summary.png")
    first = (tmp_path / "run_summary.png").read_bytes()
    assert first.startswith(b"\x89PNG") and b"Software" not in first
    assert [p.name for p in tmp_path.iterdir()] == ["run_summary.png"]


def test_the_table_writer_writes_the_experiments_plain_markdown_and_csv(tmp_path):
    """Plain columns (``---``), a heading level of the table's own, notes only where there are some, blocks after
    one blank line, and the CSV in the table's number format: what the toy and the drift experiment wrote."""
    cols = [Column("m", "method", align=""), Column("v", "value", align="")]
    block = Table("b", "block", cols, rows=[{"m": "x", "v": ""}], notes=["AA 1.0\n"], level=3)
    top = Table("t", "Top", [], level=1, blocks=[block, block])
    assert to_markdown(top) == ("# Top\n\n### block\n\n| method | value |\n|---|---|\n| x |  |\n\nAA 1.0\n\n"
                                "### block\n\n| method | value |\n|---|---|\n| x |  |\n\nAA 1.0\n\n")
    plain = Table("p", "Plain", cols, rows=[{"m": "x", "v": "1"}], data=pd.DataFrame({"v": [1 / 3]}),
                  float_format="%.6g", level=1)
    write_table(plain, tmp_path / "p.csv", tmp_path / "p.md")
    assert (tmp_path / "p.md").read_text() == "# Plain\n\n| method | value |\n|---|---|\n| x | 1 |\n"
    assert (tmp_path / "p.csv").read_text() == "v\n0.333333\n"
    write_table(plain, tmp_path / "q.csv", banner="REHEARSAL")       # CSV only; a rehearsal's rows marked
    assert (tmp_path / "q.csv").read_text() == "rehearsal,v\nTrue,0.333333\n"
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["p.csv", "p.md", "q.csv"]


def test_a_table_refuses_two_columns_with_one_key():
    """Two columns of one key would show one cell twice, under two titles (the ablation table's AA interval and Δ
    interval were both ``<benchmark>_ci``: both columns showed Δ's)."""
    with pytest.raises(ValueError, match="table 'a': column key.s. ci given twice"):
        Table("a", "A", [Column("ci", "95 % CI"), Column("d", "Δ"), Column("ci", "Δ 95 % CI")])


def test_a_table_that_shows_a_dash_says_what_it_means(tmp_path):
    """The writer adds :data:`DASH_NOTE` under a table (and under each block) that shows ``—`` where none of its own
    notes mentions it; a table that explains its ``—`` itself, or shows none, is written as it is."""
    cols = [Column("m", "method"), Column("v", "value")]
    dash = Table("d", "Dash", cols, rows=[{"m": "x", "v": "—"}], notes=["AA 1.0"])
    own = Table("o", "Own", cols, rows=[{"m": "x", "v": "—"}], notes=["— = not run."])
    full = Table("f", "Full", cols, rows=[{"m": "x", "v": "1"}], blocks=[dash])
    for table, md in ((dash, "dash"), (own, "own"), (full, "full")):
        write_table(table, md=tmp_path / f"{md}.md", latex=tmp_path / f"{md}.tex")
    notes = {md: [ln for ln in (tmp_path / f"{md}.md").read_text().splitlines() if ln and not ln.startswith(("|", "#"))]
             for md in ("dash", "own", "full")}
    assert notes == {"dash": ["AA 1.0  ", DASH_NOTE], "own": ["— = not run."], "full": ["AA 1.0  ", DASH_NOTE]}
    assert tex(DASH_NOTE) in (tmp_path / "dash.tex").read_text()
    assert "not reported" not in (tmp_path / "own.tex").read_text()
    assert dash.notes == ["AA 1.0"]          # the table itself is left as it was


def test_a_plugin_method_that_still_names_the_feature_cache_is_refused_naming_frozen_feature():
    """0.1's ``stored_query``, 0.2's former ``cached_query`` / ``feature_fns`` / ``self.cached``: each line names the
    removal and ``@frozen_feature``."""
    import ast

    source = ("class M:\n    stored_query = False\n    cached_query = True\n\n"
              "class N:\n    def __init__(self):\n        self.stored_query = True\n"
              "    def feature_fns(self):\n        return self.cached\n")
    found = removed_uses(ast.parse(source), "m.py")
    assert [f.split(": removed in version 0.2.0: ")[0] for f in found] == ["m.py:2", "m.py:3", "m.py:7", "m.py:8",
                                                                           "m.py:9"]
    assert found[0].endswith("ContinualMethod.stored_query is gone: mark the query @frozen_feature(QUERY, "
                             "benchmark_cache=True) (intact.methods.shared.frozen) (CHANGELOG.md)")
    assert all("@frozen_feature" in f for f in found)
    assert "ContinualMethod.feature_fns is gone" in found[3] and "ContinualMethod.cached is gone" in found[4]


def test_a_plugin_method_that_reads_intacts_state_from_the_method_is_refused_naming_its_penalty():
    """0.1's families set ``self.reg`` and ``double_ce``: a plugin that reads them is refused at load; one that sets
    its own ``self.reg`` is not."""
    import ast

    reads = "class M:\n    double_ce = True\n    def f(self):\n        return self.reg.teacher\n"
    found = removed_uses(ast.parse(reads), "m.py")
    assert [f.split(": ")[0] for f in found] == ["m.py:2", "m.py:4"]
    assert "watch_layers(..., doubles_ce=True)" in found[0]
    assert "lives in its penalty (a family's self.intact" in found[1]
    owns = "class M:\n    def __init__(self):\n        self.reg = 1\n    def f(self):\n        return self.reg\n"
    assert removed_uses(ast.parse(owns), "m.py") == []


def test_a_plugin_method_using_what_left_continual_method_is_refused_naming_the_replacement():
    """0.2.0's contract (docs/adding-a-method.md): a method class (or its base in the same module) that defines a
    hook that left ContinualMethod, reads a helper it no longer has, or derives from it directly and reads a
    constructor argument it no longer keeps, is refused at load; its own attributes of those names are not."""
    import ast

    old = ("class Base(ContinualMethod):\n"
           "    def __init__(self, run, settings, backbone, num_classes, num_tasks):\n"
           "        super().__init__(run, settings, backbone, num_classes, num_tasks)\n"
           "    def loss(self, x, y):\n        return self.backbone(x)\n"
           "class M(Base):\n    def start_task(self, task, data):\n"
           "        return self.generator(task, 'p'), self.batches(data), self.num_classes\n"
           "class Other:\n    def loss(self):\n        return self.batches\n")
    found = removed_uses(ast.parse(old), "m.py", "M")
    assert [f.split(": ")[0] for f in found] == ["m.py:3", "m.py:4", "m.py:5", "m.py:7", "m.py:8", "m.py:8", "m.py:8"]
    said = " | ".join(found)
    for replacement in ("ContinualMethod.__init__(run, settings) keeps no backbone", "base.batch_loss(method, x, y)",
                        "start_task is begin_task", "task_generator(self.run.seed, task, purpose)",
                        "base.batches(self, data)"):
        assert replacement in said
    assert removed_uses(ast.parse(old), "m.py") == []        # a benchmark's class is not a method's
    own = ("class M(ContinualMethod):\n    def __init__(self, run, settings, backbone):\n"
           "        super().__init__(run, settings)\n        self.backbone = backbone\n"
           "    def batches(self):\n        return self.backbone\n")
    assert removed_uses(ast.parse(own), "m.py", "M") == []


def test_no_builtin_implementation_uses_a_removed_name():
    """The registry reads a plugin's implementation module for what 0.2.0 removed, not the package's own (it would
    cost every process ~0.06 s): here every built-in method's and benchmark type's module is read once, as a
    plugin's would be."""
    import importlib.util

    from intact.data import BENCHMARKS
    from intact.methods import METHODS
    from intact.unimported import module_ast

    targets = [(decl.implementation, True) for decl in METHODS.builtins().values()]
    targets += [(decl.implementation, False) for decl in BENCHMARKS.builtins().values()]
    assert len(targets) > 20 and all(t.startswith("intact.") for t, _ in targets)
    for target, method in targets:
        module, _, cls = target.partition(":")
        origin = importlib.util.find_spec(module).origin
        assert removed_uses(module_ast(origin), origin, cls if method else None) == [], target
