"""Studies declared in the config expand into named runs; their tables and figures come from metrics only."""

import numpy as np
import pandas as pd
import pytest

from conftest import tiny_config
from intact.config import ConfigError, resolve_run, validate_config
from intact.report.studies import write_study_report
from intact.report.tables import ablation_table, integration_table, sensitivity_table, summarize_runs, to_markdown
from intact.studies import ablation_variants, expand_studies, format_value, sensitivity_grid


def _studies_config():
    cfg = tiny_config()
    cfg["studies"] = {
        "seeds": [0, 1],
        "main": {"methods": ["coda_p", "coda_p+intact"]},
        "integration": {"methods": ["coda_p"]},
        "ablation": {"method": "coda_p+intact", "terms": ["intdrift", "var", "align", "feat"]},
        "sensitivity": {"method": "coda_p+intact@lambda_align=0.5", "seeds": [3], "grid": {"lambda_var": [1e-3, 0.1], "lambda_intdrift": [1e-4, 1]}},
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
    assert [format_value(v) for v in (1e-6, 1e-4, 0.01, 0.5, 1, 10, 2.5e-4)] == ["1e-6", "1e-4", "0.01", "0.5", "1", "10", "0.00025"]


def _fake_runs(methods_aa: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for method, aas in methods_aa.items():
        for seed, aa in enumerate(aas):
            rows.append({"method": method, "seed": seed, "eval_split": "test", "aa": aa, "forgetting_max": 100 - aa,
                         "forgetting_one_step": 1.0, "bwt": -1.0, "caa": aa + 5, "aa_evolution": [aa + 10, aa + 5, aa],
                         "task_names": ["a", "b", "c"], "certificate": [None, 0.5, 0.25], "train_seconds": 3.0})
    return pd.DataFrame(rows)


def test_summary_ablation_and_integration_tables():
    runs = _fake_runs({"m": [40, 42], "m+intact": [50, 54], "m+intact-no_var": [49, 51]})
    s = summarize_runs(runs, ["m", "m+intact"])
    assert list(s["method"]) == ["m", "m+intact"]
    assert s.loc[1, "aa_mean"] == 52 and s.loc[1, "aa_std"] == pytest.approx(np.std([50, 54], ddof=1))
    assert s.loc[1, "certificate_last_mean"] == 0.25
    md = to_markdown(s)
    assert "52.00 ± 2.83" in md and "Forgetting (max-final)" in md
    abl = ablation_table(runs, "m+intact", {"var": "m+intact-no_var", "feat": "m+intact-no_feat"})
    assert list(abl["method"]) == ["m+intact", "m+intact-no_var"]           # missing variants are skipped
    assert abl.loc[1, "delta_aa"] == pytest.approx(-2.0) and not abl.loc[1, "var"] and abl.loc[1, "feat"]
    integ = integration_table(runs, ["m"])
    assert integ.loc[0, "delta_aa"] == pytest.approx(11.0)


def test_study_reports_are_written_from_metrics(tmp_path):
    cfg = _studies_config()
    spec = cfg["studies"]["sensitivity"]
    grid = sensitivity_grid(spec)
    runs = _fake_runs({name: [40 + i] for i, points in enumerate(grid.values()) for name in points.values()})
    outputs = {"csv": tmp_path / "s.csv", "md": tmp_path / "s.md", "figure": tmp_path / "s.png",
               **{f"figure_{k}": tmp_path / f"s_{k}.png" for k in grid}}
    write_study_report("sensitivity", spec, runs, outputs, "digits")
    assert all(p.stat().st_size > 0 for p in outputs.values())
    table = sensitivity_table(runs, grid)
    assert set(table["lambda"]) == {"lambda_var", "lambda_intdrift"} and len(table) == 4
    abl_spec = cfg["studies"]["ablation"]
    runs = _fake_runs({abl_spec["method"]: [50], **{n: [45] for n in ablation_variants(abl_spec).values()}})
    write_study_report("ablation", abl_spec, runs, {"csv": tmp_path / "a.csv", "md": tmp_path / "a.md"}, "digits")
    assert "-5.00" in (tmp_path / "a.md").read_text()
