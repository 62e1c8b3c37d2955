"""A pytest plugin: each failing test's report goes to a file the moment it fails, not at the session's end.

    PYTEST_FAILURES=failures.txt python -m pytest -p pytest_failures_now ...   (tools/ on PYTHONPATH)

A run cut short by a time limit (a device lease: ``tools/gpu_check.sh``) prints its tracebacks only at the end,
so it loses them all; this file keeps those of the tests that failed before the cut. Under xdist only the
controlling process writes (it sees every worker's reports), so nothing is written twice.
"""

from __future__ import annotations

import os

import pytest


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("PYTEST_FAILURES")
    if not path or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")
