"""tools/pytest_failures_now.py (the GPU check's pytest plugin): a failure's report is in the file as soon as the
test has failed, before the session ends, and once per failure under xdist."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO, pythonpath

PLANTED = '''
import os, pytest
def test_fails():
    assert 1 == 2, "planted failure"
@pytest.fixture
def broken():
    raise RuntimeError("planted setup error")
def test_errors(broken):
    pass
def test_later_sees_both():  # runs after the two above, in the same process: the file already holds them
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    text = open(os.environ["PYTEST_FAILURES"]).read()
    assert "planted failure" in text and "planted setup error" in text
'''


def _run(tmp_path, *args):
    (tmp_path / "test_planted.py").write_text(PLANTED)
    failures = tmp_path / "failures.txt"
    failures.unlink(missing_ok=True)
    env = {**os.environ, "PYTEST_FAILURES": str(failures), "PYTHONPATH": pythonpath(REPO / "tools")}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_failures_now",
                           *args, "test_planted.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    return proc, failures.read_text()


@pytest.mark.slow  # two pytest sessions, one under xdist: seconds of CPU
def test_each_failure_is_written_when_it_happens_and_once_under_xdist(tmp_path):
    proc, text = _run(tmp_path)
    assert "1 failed, 1 passed, 1 error" in proc.stdout, proc.stdout
    heads = [line for line in text.splitlines() if line.startswith("==== ")]
    assert heads == ["==== test_planted.py::test_fails (call)", "==== test_planted.py::test_errors (setup)"]
    proc, text = _run(tmp_path, "-n", "2", "--dist", "loadfile")
    assert "1 failed, 1 passed, 1 error" in proc.stdout, proc.stdout
    assert sorted(line for line in text.splitlines() if line.startswith("==== ")) == sorted(heads)
