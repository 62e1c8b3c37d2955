"""Studies declared in the config expand into named runs; their tables and figures come from metrics only."""

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, tiny_config
from intact.config import ConfigError, resolve_run, resolver, validate_config
from intact.layering import read_files
from intact.rehearse import markdown_problems
from intact.report.completeness import Ledger
from intact.report.paper_tables import ablation_table
from intact.report.render import to_markdown
from intact.report.studies import write_study_report
from intact.report.settings import default_points
from intact.report.tables import integration_table, sensitivity_table, summary_table
from intact.results import StoredResults, StoredRun
from intact.naming import format_value
from intact.studies import ablation_variants, expand_studies, sensitivity_grid


def _studies_config():
    cfg = tiny_config()
    cfg["studies"] = {
        "seeds": [0, 1],
        "main": {"methods": ["coda_p", "coda_p+intact"]},
        "integration": {"methods": ["coda_p"]},
        "ablation": {"method": "coda_p+intact", "terms": ["intdrift", "var", "align", "feat"]},
        "sensitivity": {"method": "coda_p+intact@lambda_align=0.5", "seeds": [3],
                        "grid": {"lambda_var": [1e-3, 0.1], "lambda_intdrift": [1e-4, 1]}},
    }
    return cfg


def test_studies_expand_into_named_runs_that_resolve():
    cfg = _studies_config()
    validate_config(cfg)
    s = expand_studies(cfg)
    assert s["integration"].methods == ("coda_p", "coda_p+intact")
    assert s["ablation"].methods == ("coda_p+intact", "coda_p+intact-no_intdrift", "coda_p+intact-no_var",
                                     "coda_p+intact-no_align", "coda_p+intact-no_feat")
    assert s["sensitivity"].methods == (
        "coda_p+intact@lambda_align=0.5,lambda_var=1e-3", "coda_p+intact@lambda_align=0.5,lambda_var=0.1",
        "coda_p+intact@lambda_align=0.5,lambda_intdrift=1e-4", "coda_p+intact@lambda_align=0.5,lambda_intdrift=1")
    assert s["sensitivity"].seeds == (3,) and s["ablation"].seeds == (0, 1)
    run = resolve_run(cfg, "digits", s["sensitivity"].methods[2], 3)
    assert run.intact.lambda_intdrift == 1e-4 and run.intact.lambda_align == 0.5
    assert resolve_run(cfg, "digits", "coda_p+intact-no_feat", 0).intact.lambda_feat == 0.0


def test_a_bad_study_is_rejected_at_start_up():
    cfg = _studies_config()
    cfg["studies"]["ablation"]["terms"] = ["drift"]
    with pytest.raises(ConfigError, match="drift"):
        validate_config(cfg)
    cfg = _studies_config()
    cfg["studies"]["main"]["methods"] = ["coda_p", "nonexistent"]
    with pytest.raises(ConfigError, match="nonexistent"):
        validate_config(cfg)


def test_sweep_values_get_readable_names():
    assert [format_value(v) for v in (1e-6, 1e-4, 0.01, 0.5, 1, 10,
                                      2.5e-4)] == ["1e-6", "1e-4", "0.01", "0.5", "1", "10", "0.00025"]


def _fake_runs(methods_aa: dict[str, list[float]], benchmark: str = "digits") -> StoredResults:
    """Stored runs (no files) with the given final AA per seed."""
    runs = []
    for method, aas in methods_aa.items():
        for seed, aa in enumerate(aas):
            metrics = {"method": method, "seed": seed, "eval_split": "test", "aa": aa, "forgetting_max": 100 - aa,
                       "forgetting_one_step": 1.0, "bwt": -1.0, "caa": aa + 5, "aa_evolution": [aa + 10, aa + 5, aa],
                       "task_names": ["a", "b", "c"], "num_tasks": 3, "certificate": [None, 0.5, 0.25],
                       "train_seconds": 3.0}
            runs.append(StoredRun(benchmark, method, seed, metrics, ()))
    return StoredResults(runs)


def test_summary_ablation_and_integration_tables():
    runs = _fake_runs({"m": [40, 42], "m+intact": [50, 54], "m+intact-no_var": [49, 51]})
    s = summary_table("default_run", "t", runs, "digits", ["m", "m+intact", "not_run"])
    assert list(s.data["method"]) == ["m", "m+intact"]                 # a method without runs is left out
    assert s.data.loc[1, "aa_mean"] == 52 and s.data.loc[1, "aa_std"] == pytest.approx(np.std([50, 54], ddof=1))
    assert s.data.loc[1, "certificate_last_mean"] == 0.25
    md = to_markdown(s)
    assert "52.00 ± 2.83" in md and "Forgetting (max-final)" in md and "Certificate n/a" not in md
    # InTAct's paired gain: d = 10, 12; mean 11, sd sqrt(2), t(0.975, 1) = 12.706: 11 ± 12.706 sqrt(2) / sqrt(2)
    gain = s.blocks[0].data.iloc[0]
    assert (gain["a"], gain["b"], gain["diff_mean"], gain["better"], gain["seeds"]) == ("m+intact", "m", 11.0, 2, 2)
    assert (gain["ci_low"], gain["ci_high"]) == pytest.approx((11 - 12.7062, 11 + 12.7062), abs=1e-4)
    assert "+10.00 / +12.00 | +11.00 | [-1.71, +23.71] | 2 of 2" in md and "Student's t" in md
    abl_table = ablation_table(Ledger("ablation", runs), {"method": "m+intact", "terms": ["var", "feat"]}, ["digits"])
    # AA's 95 % interval and Δ's, each in its own column: 52 ± t(0.975, 1) · 2.83 / √2; Δ = -1, -3: -2 ± t · 1.41 / √2
    full, no_var = abl_table.rows[:2]
    assert not any("backbone" in note for note in abl_table.notes)   # not told which: it said "none declared"
    assert (full["digits_aa_ci"], full["digits_ci"]) == ("[26.59, 77.41]", "—")
    assert (no_var["digits_aa_ci"], no_var["digits_ci"]) == ("[37.29, 62.71]", "[-14.71, +10.71]")
    abl = abl_table.data
    assert list(abl["run"]) == ["m+intact", "m+intact-no_var", "m+intact-no_feat"]
    assert abl.loc[1, "diff_mean"] == pytest.approx(-2.0) and abl.loc[1, "full_better"] == 2
    assert np.isnan(abl.loc[2, "here_mean"])                           # not run: '—'
    integ = integration_table("t", runs, "digits", ["m"]).data
    assert integ.loc[0, "diff_mean"] == pytest.approx(11.0) and integ.loc[0, "better"] == 2


def test_a_summary_says_which_runs_record_no_certificate():
    """The main study's n/a certificates (joint, S-Prompts, ESN, CPrompt) are named in a note, not left unexplained."""
    runs = _fake_runs({"m": [40, 42], "s_prompts": [60, 61]})
    for r in runs.select("digits", "s_prompts"):
        r.metrics["certificate"] = [None] * 3
    md = to_markdown(summary_table("study_main", "t", runs, "digits", ["m", "s_prompts"]))
    assert "| `s_prompts` | 2 | 60.50 ± 0.71 |" in md and "| n/a |" in md
    assert "Certificate n/a: `s_prompts` records none (no hypercube" in md


def test_a_non_finite_certificate_is_named_and_the_finite_ones_are_kept():
    runs = _fake_runs({"m+intact": [50, 51, 52]})
    for r, last in zip(runs.select("digits", "m+intact"), (0.2, 0.3, float("nan"))):
        r.metrics["certificate"] = [None, 0.5, last]
    table = summary_table("default_run", "t", runs, "digits", ["m+intact"])
    md = to_markdown(table)
    assert "| 0.25 (2 of 3) |" in md and table.data.loc[0, "certificate_last_mean"] == pytest.approx(0.25)
    assert "Certificate not finite" in md and "`m+intact` on seed 2" in md and "records none" not in md


def test_an_integration_row_names_the_intact_run_it_compares():
    """Two entries of one method (its default pairing, and one with its own settings) are two rows told apart."""
    runs = _fake_runs({"l2p": [50, 52], "l2p+intact": [60, 62], "l2p+intact@lambda_var=1e-2": [40, 42]})
    md = to_markdown(integration_table("t", runs, "digits", ["l2p", "l2p@lambda_var=1e-2"]))
    assert "| `l2p` | 2 |" in md and "| `l2p` vs `l2p+intact@lambda_var=1e-2` | 2 |" in md


def test_an_intact_run_with_its_own_settings_is_paired_with_its_baseline():
    """Issue 42: `coda_p` and `coda_p+intact@lambda_feat=3` in run.methods give a paired row with its interval."""
    runs = _fake_runs({"coda_p": [40, 42, 41], "coda_p+intact@lambda_feat=3": [50, 54, 51]})
    s = summary_table("default_run", "t", runs, "digits", ["coda_p", "coda_p+intact@lambda_feat=3"])
    gain = s.blocks[0].data
    assert list(zip(gain["a"], gain["b"])) == [("coda_p+intact@lambda_feat=3", "coda_p")]
    assert gain.loc[0, "diff_mean"] == pytest.approx(32 / 3) and gain.loc[0, "ci_low"] < gain.loc[0, "ci_high"]
    assert "No pair of runs" not in to_markdown(s)


def test_sensitivity_compares_each_value_with_its_default():
    """The default of a swept λ is the grid value whose run resolves to the study's method (cfg: λ_Var 1e-4)."""
    cfg = _studies_config()
    spec = {"method": "coda_p+intact", "grid": {"lambda_var": [1e-4, 0.1], "lambda_intdrift": [1e-4, 1]}}
    defaults = default_points(resolver(cfg), "digits", spec)
    assert defaults == {"lambda_var": 1e-4, "lambda_intdrift": None}
    grid = sensitivity_grid(spec)
    runs = _fake_runs({grid["lambda_var"][1e-4]: [50, 52, 51], grid["lambda_var"][0.1]: [47, 52, 48],
                       grid["lambda_intdrift"][1]: [40, 40, 40]})
    table = sensitivity_table("t", runs, "digits", spec, defaults)
    data = table.data.set_index("method")
    point = data.loc[grid["lambda_var"][0.1]]
    assert (point["diff_mean"], point["better"], point["worse"], point["seeds"]) == pytest.approx((-2.0, 0, 2, 3))
    assert data.loc[grid["lambda_var"][1e-4], "default"] and np.isnan(data.loc[grid["lambda_intdrift"][1], "diff_mean"])
    assert "(default)" in to_markdown(table)
    assert "No grid value of lambda_intdrift equals the default" in to_markdown(table)


@pytest.mark.slow
def test_study_reports_are_written_from_metrics(tmp_path):
    cfg = _studies_config()
    spec = cfg["studies"]["sensitivity"]
    grid = sensitivity_grid(spec)
    runs = _fake_runs({name: [40 + i] for i, points in enumerate(grid.values()) for name in points.values()})
    outputs = {"csv": tmp_path / "s.csv", "md": tmp_path / "s.md", "figure": tmp_path / "s.png",
               **{f"figure_{k}": tmp_path / f"s_{k}.png" for k in grid}}
    write_study_report("sensitivity", spec, runs, outputs, "digits",
                       defaults=default_points(resolver(cfg), "digits", spec))
    assert all(p.stat().st_size > 0 for p in outputs.values())
    table = pd.read_csv(outputs["csv"])
    assert set(table["lambda"]) == {"lambda_var", "lambda_intdrift"} and len(table) == 4
    abl_spec = cfg["studies"]["ablation"]
    runs = _fake_runs({abl_spec["method"]: [50], **{n: [45] for n in ablation_variants(abl_spec).values()}})
    write_study_report("ablation", abl_spec, runs, {"csv": tmp_path / "a.csv", "md": tmp_path / "a.md"}, "digits")
    assert "-5.00" in (tmp_path / "a.md").read_text()


@pytest.mark.parametrize("name", ["domainnet", "imagenet_mix"])
def test_the_main_studys_report_shows_the_runs_the_workflow_planned_and_no_empty_row(name, tmp_path):
    """A paper config's main study runs every row under both protocols, but a row the official protocol changes
    nothing for (coda_p and its InTAct runs: same_as_default) is one run under its default name. Its report gets the
    study's runs as the workflow planned them, so it pairs no ``@protocol=official`` name that was never run (a
    report that expanded the study again showed three such pairs, every cell ``—``), and every ``—`` is explained."""
    cfg = read_files([REPO / "config.yaml", REPO / "configs/paper" / f"{name}.yaml"])
    study = expand_studies(cfg)["main"]
    stored = _fake_runs({m: [50.0 + i, 51.0 + i, 53.0 + i] for i, m in enumerate(study.methods)}, name)
    assert "coda_p+intact" in study.methods and "coda_p+intact@protocol=official" not in study.methods
    outputs = {"csv": tmp_path / "m.csv", "md": tmp_path / "m.md", "plot": tmp_path / "m.png"}
    write_study_report("main", study.spec, stored, outputs, name, methods=study.methods)
    paired = pd.read_csv(tmp_path / "study_main_paired.csv")
    assert len(paired) == 3 and paired["seeds"].eq(3).all() and not paired["a"].str.contains("protocol").any()
    assert markdown_problems(outputs["md"].read_text(), own=True) == []
    with pytest.raises(ValueError, match="needs its runs"):
        write_study_report("main", study.spec, stored, outputs, name)
