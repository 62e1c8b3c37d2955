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
