"""docs/one-job.md names exactly the package files one ``train_task`` job runs (issue 44 item 7): a tiny job's two
tasks traced (tests/trace_job.py) against the files the page names."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, pythonpath
from intact.runtime.warm import ENV_SOCKET

PAGE = REPO / "docs/one-job.md"
TRACER = Path(__file__).with_name("trace_job.py")


def expand(pattern: str) -> list[str]:
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py`` (shell brace expansion, any number of groups, none nested)."""
    parts = re.split(r"\{([^{}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def named_files(text: str) -> tuple[set[str], set[str]]:
    """(package files relative to ``src/intact``, workflow files) the page names: every ``*.py`` or ``*.smk`` in
    backquotes, braces expanded, but the suite's (``tests/``); a package file is named relative to ``src/intact/``."""
    names = [n for m in re.findall(r"`([^`\s]+\.(?:py|smk))`", text) for n in expand(m) if not n.startswith("tests/")]
    workflow = {n for n in names if n.startswith("workflow/")}
    return {n.removeprefix("src/intact/") for n in names} - workflow, workflow


def test_the_page_names_its_files_as_the_reader_finds_them():
    package, workflow = named_files(PAGE.read_text())
    assert named_files("`a/{b,c}.py`, `workflow/x.smk`, `{d,e}/{f,g}.py` `tests/t.py` `t<x>/{a,b}.safetensors`") == (
        {"a/b.py", "a/c.py", "d/f.py", "d/g.py", "e/f.py", "e/g.py"}, {"workflow/x.smk"})
    assert workflow == {"workflow/rules/train.smk", "workflow/rules/common.smk", "workflow/scripts/train_task.py"}
    assert [f for f in sorted(package) if not (REPO / "src/intact" / f).is_file()] == []


@pytest.mark.slow
def test_the_one_job_page_names_exactly_the_files_a_job_runs(tiny_bench, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != ENV_SOCKET}   # the job runs here, cold
    env["PYTHONPATH"] = pythonpath(REPO / "src")
    proc = subprocess.run([sys.executable, str(TRACER), str(tiny_bench["manifest"]), str(tiny_bench["weights"]),
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    traced = set(json.loads(proc.stdout.splitlines()[-1]))
    assert (tmp_path / "task1/eval.json").is_file()           # both tasks ran to their last output
    named, _ = named_files(PAGE.read_text())
    assert named == traced, (f"docs/one-job.md names files the job does not run: {sorted(named - traced)}; the job "
                             f"runs files the page does not name: {sorted(traced - named)}")
