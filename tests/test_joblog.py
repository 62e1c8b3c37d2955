"""A job's log file (intact.runtime.joblog.log_to) holds what the job printed and, when it fails, its traceback."""

from __future__ import annotations

import os

import pytest

from intact.runtime.joblog import log_to


def test_an_exception_leaving_the_job_is_written_to_its_log(tmp_path):
    log = tmp_path / "logs" / "job.log"
    with pytest.raises(ValueError, match="boom"):
        with log_to(log, "some_rule"):
            os.write(1, b"before the failure\n")   # fd 1 (pytest replaces sys.stdout)
            raise ValueError("boom")
    text = log.read_text()
    assert "before the failure" in text and "Traceback (most recent call last)" in text
    assert text.rstrip().endswith("ValueError: boom")
    with log_to(log):
        os.write(2, b"a later job\n")   # fds restored and the log appended to
    assert log.read_text().startswith(text) and log.read_text().endswith("a later job\n")
