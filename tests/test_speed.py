"""``intact speed`` on a tiny ViT: the table's rows, the JSON schema, the counted backbone passes, the spread and
load recorded per row, and the paired mode."""

from __future__ import annotations

import json
import statistics

import pytest

from conftest import REPO
from intact.cli import main
from intact.speed import busy, spread
from intact.speed_report import ratios

TINY = ["--model", "vit_rgb_p8", "--batch", "4", "--repeats", "2", "--classes", "10", "--config",
        str(REPO / "config.yaml")]


@pytest.mark.slow
def test_speed_writes_the_rows_and_counts_the_passes(tmp_path, capsys):
    out = tmp_path / "speed.json"
    assert main(["speed", "--model", "vit_rgb_p8", "--batch", "4", "--repeats", "2", "--classes", "10",
                 "--config", str(REPO / "config.yaml"), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(r["method"], r["cache"]) for r in rows] == [
        ("coda_p", False), ("coda_p", True), ("coda_p+intact", False), ("coda_p+intact", True)]
    # live: query + prompted (+ teacher with InTAct at task 1); cached: the prompted pass alone
    assert [r["passes_per_step"] for r in rows] == [2, 1, 3, 1]
    for r in rows:
        assert {"step_s", "passes_per_step", "peak_mb", "trainable_params", "total_params", "eval_batch_s"} <= set(r)
        assert r["step_s"] > 0 and 0 < r["trainable_params"] < r["total_params"]
        assert r["step_min_s"] <= r["step_s"] <= r["step_max_s"] and len(r["step_times_s"]) == 2
        assert r["eval_min_s"] <= r["eval_batch_s"] <= r["eval_max_s"]
        assert {"load_before", "load_after"} <= set(r)
    machine = json.loads(out.read_text())["machine"]
    assert machine["cpu_model"] and machine["cores"] >= 1 and isinstance(machine["busy"], bool)
    assert "coda_p+intact / coda_p step (cached)" in capsys.readouterr().out


@pytest.mark.slow
def test_pairs_mode_alternates_the_rows_and_reports_per_step_ratios(tmp_path, capsys):
    out = tmp_path / "speed.json"
    assert main(["speed", *TINY, "--pairs", "--methods", "coda_p", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["pairs"] is True
    assert [(r["method"], r["cache"],
             r["passes_per_step"]) for r in got["results"]] == [("coda_p", False, 2), ("coda_p", True, 1)]
    live, cached = got["results"]
    per_step = [a / b for a, b in zip(cached["step_times_s"], live["step_times_s"])]
    want = {"median": statistics.median(per_step), "min": min(per_step), "max": max(per_step)}
    assert got["ratios"]["coda_p cached / uncached step"] == want
    assert "per-step ratios" in capsys.readouterr().out


@pytest.mark.parametrize("args, fragment", [
    (["--config", "nosuch.yaml"], "config file 'nosuch.yaml' does not exist"),
    (["--model", "nosuch"], "--model nosuch: not a timm model"),
    (["--methods", "nosuch"], "--methods nosuch: config: method 'nosuch': unknown method"),
    (["--batch", "-3"], "--batch -3: expected at least 1"),
    (["--benchmark", "nope"], "--benchmark nope: not in the config"),
    (["--device", "bogus"], "--device bogus: "),
])
def test_a_wrong_option_is_one_line_before_any_row(args, fragment, capsys):
    """Each was a traceback, some after a row's process had started (before 2026-12-01)."""
    with pytest.raises(SystemExit) as exit_:
        main(["speed", "--config", str(REPO / "config.yaml"), *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and fragment in err and "Traceback" not in err and "rows" not in err, err


def test_spread_ratios_and_busy():
    assert spread([9.0, 3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}  # the warm-up step is left out
    rows = [{"method": "coda_p", "cache": c, "step_s": s, "step_times_s": t}
            for c, s, t in ((False, 4.0, [4.0, 8.0, 2.0]), (True, 1.0, [1.0, 1.0, 1.0]))]
    assert ratios(rows, paired=False) == {"coda_p cached / uncached step": {"median": 0.25}}
    assert ratios(rows, paired=True) == {"coda_p cached / uncached step": {"median": 0.25, "min": 0.125, "max": 0.5}}
    assert busy(1.5, 2) and not busy(0.9, 2) and not busy(None, 2)
    # a row stepping on 2 threads makes a load of ~2 by itself on a quiet 2-core machine: not busy
    assert not busy(2.4, 2, own=2) and busy(3.5, 2, own=2)


def test_ratios_follow_the_methods_measured():
    """Any method, not only CODA-P: its +intact row over it per cache setting, and cached over uncached; a
    method without its +intact row (s_prompts refuses it) gets only its cache ratio."""
    times = {("ka_prompt", False): 4.0, ("ka_prompt", True): 2.0, ("ka_prompt+intact", False): 6.0,
             ("ka_prompt+intact", True): 3.0, ("s_prompts", False): 2.0, ("s_prompts", True): 1.0}
    rows = [{"method": m, "cache": c, "step_s": t, "step_times_s": [t]} for (m, c), t in times.items()]
    assert {k: v["median"] for k, v in ratios(rows, paired=True).items()} == {
        "ka_prompt+intact / ka_prompt step (cached)": 1.5, "ka_prompt+intact / ka_prompt step (uncached)": 1.5,
        "ka_prompt cached / uncached step": 0.5, "ka_prompt+intact cached / uncached step": 0.5,
        "s_prompts cached / uncached step": 0.5}


@pytest.mark.slow
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
        assert t["feature_cache"]["query"].startswith("read from")  # the query cache the tool wrote is read


class Hog:
    """A stand-in row (built in a child by RowProcess) that holds ``mb`` MiB of written memory."""

    def __init__(self, mb: int):
        self.block = b"\x01" * (mb * 2**20)  # written, so resident

    def step(self) -> float:
        return 0.0

    def eval_batch(self) -> float:
        return 0.0

    def result(self) -> dict:
        import torch

        from intact.efficiency import peak_memory_bytes
        return {"peak_mb": peak_memory_bytes(torch.device("cpu")) / 2**20, "pid": __import__("os").getpid()}


@pytest.mark.slow
def test_each_row_reports_its_own_peak_memory():
    """Rows alive at the same time (as in --pairs) each report their own process's peak: a small row built
    after a 300 MiB one does not inherit its peak (in one process ru_maxrss would say 300+ for both)."""
    from intact.speed import RowProcess

    rows = [RowProcess(300, factory=Hog), RowProcess(0, factory=Hog)]
    try:
        for r in rows:
            r.step()
        big, small = (r.result() for r in rows)
    finally:
        for r in rows:
            r.close()
    assert big["pid"] != small["pid"] and __import__("os").getpid() not in (big["pid"], small["pid"])
    assert big["peak_mb"] - small["peak_mb"] > 250, (big, small)


def test_the_peak_memory_is_in_bytes_on_linux_and_macos(monkeypatch):
    """Linux's VmHWM where there is a /proc; else ``ru_maxrss``, which counts kilobytes on Linux and bytes on macOS
    (a laptop's train.json said 1,024 times its peak before)."""
    import builtins
    import resource

    import torch

    from intact import efficiency

    cpu = torch.device("cpu")
    hwm = efficiency.peak_memory_bytes(cpu)   # ru_maxrss is at least this image's peak (to the kernel's lag)
    assert 2**20 < hwm < 1.1 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    opened = builtins.open

    def without_proc(path, *args, **kwargs):   # a system without /proc (macOS)
        if path == "/proc/self/status":
            raise OSError(path)
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", without_proc)
    monkeypatch.setattr(efficiency.resource, "getrusage", lambda who: type("Usage", (), {"ru_maxrss": 5000}))
    for platform, expected in (("linux", 5000 * 1024), ("darwin", 5000)):
        monkeypatch.setattr(efficiency.sys, "platform", platform)
        assert efficiency.peak_memory_bytes(cpu) == expected, platform
