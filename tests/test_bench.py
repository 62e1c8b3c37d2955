"""``intact bench`` on a tiny ViT: the table's rows, the JSON schema and the counted backbone passes."""

from __future__ import annotations

import json

from conftest import REPO
from intact.cli import main


def test_bench_writes_the_rows_and_counts_the_passes(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--model", "vit_rgb_p8", "--batch", "4", "--repeats", "2", "--classes", "10",
                 "--config", str(REPO / "config.yaml"), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(r["method"], r["cache"]) for r in rows] == [
        ("coda_p", False), ("coda_p", True), ("coda_p+intact", False), ("coda_p+intact", True)]
    # live: query + prompted (+ teacher with InTAct at task 1); cached: the prompted pass alone
    assert [r["passes_per_step"] for r in rows] == [2, 1, 3, 1]
    for r in rows:
        assert {"step_s", "passes_per_step", "peak_mb", "trainable_params", "total_params", "eval_batch_s"} <= set(r)
        assert r["step_s"] > 0 and 0 < r["trainable_params"] < r["total_params"]
    assert "coda_p+intact / coda_p step" in capsys.readouterr().out


def test_paper_scale_check_runs_at_toy_size(tmp_path):
    """tools/paper_scale_check.py (the GPU check's real-steps part) end to end on a tiny ViT at 32 px."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(REPO / "tools/paper_scale_check.py"), str(tmp_path / "out"),
                           "--model", "vit_rgb_p8", "--size", "32", "--batch", "8", "--steps", "8", "--epochs", "1",
                           "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out/paper_scale.json").read_text())
    assert [t["task"] for t in summary["tasks"]] == [0, 1]
    for t in summary["tasks"]:
        assert t["images_per_s"] > 0 and t["state_mb"] > 0 and len(t["accuracy"]) == 2
        assert t["feature_cache"]["query"].startswith("stored")  # the query cache the tool wrote is read
