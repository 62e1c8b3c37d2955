"""The default run's behaviour is unchanged bit for bit by refactors (values stored in tests/data/)."""

from __future__ import annotations

import json

import pytest

from regression_run import STORED, compute, environment


def test_default_runs_are_bit_identical_to_the_stored_values(tmp_path):
    stored = json.loads(STORED.read_text())
    if stored["environment"] != environment():
        pytest.skip(f"stored on {stored['environment']}, this is {environment()}: bit-identity holds per torch build and CPU kernel set")
    now = json.loads(json.dumps(compute(tmp_path)))     # the same float spelling as the stored file
    for method, want in stored["runs"].items():
        got = now["runs"][method]
        assert got["R"] == want["R"], method
        assert got["tensors"] == want["tensors"], method
        assert got["train"] == want["train"], method
