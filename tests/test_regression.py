"""The default run's behaviour is unchanged bit for bit by refactors (values stored in tests/data/).

One stored reference per machine fingerprint (see ``tests/regression_run.py``): tensors and loss terms are
compared bit for bit where this machine's fingerprint has a reference, R wherever the stored references
agree on it. ``python tests/regression_run.py --add`` stores this machine's reference.
"""

from __future__ import annotations

import json

import pytest

from regression_run import compute, describe, fingerprint, load_references, matching, shared_R


@pytest.fixture(scope="module")
def now(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The regression run on this machine, once for both tests (the same float spelling as the stored file)."""
    return json.loads(json.dumps(compute(tmp_path_factory.mktemp("regression"))))


@pytest.mark.slow
def test_R_matches_the_R_every_stored_reference_agrees_on(now):
    refs = load_references()
    want = shared_R(refs)
    if want is None:
        pytest.skip("the stored references disagree on R: R is compared per fingerprint only (the next test)")
    for method, R in want.items():
        assert now["runs"][method]["R"] == R, (
            f"{method}: R differs from the R of all {len(refs)} stored references "
            f"({', '.join(describe(r['fingerprint']) for r in refs)}); this machine is {describe(fingerprint())}")


@pytest.mark.slow
def test_default_runs_are_bit_identical_to_the_stored_values(now):
    refs = load_references()
    mine = matching(refs, now["fingerprint"])
    if mine is None:
        pytest.skip(f"no stored reference for this machine {describe(now['fingerprint'])}; stored: "
                    f"{'; '.join(describe(r['fingerprint']) for r in refs)}. Bit-identity holds per CPU, kernel set "
                    "and BLAS build: `python tests/regression_run.py --add` on a known-good commit stores this one")
    for method, want in mine["runs"].items():
        got = now["runs"][method]
        assert got["R"] == want["R"], method
        assert got["tensors"] == want["tensors"], method
        # the keys the reference recorded (a reference stored before a key existed is compared without it)
        assert [{k: g.get(k) for k in w} for g, w in zip(got["train"], want["train"])] == want["train"], method
        assert len(got["train"]) == len(want["train"]), method


def test_references_are_keyed_on_the_whole_fingerprint_and_R_is_shared_only_when_all_agree():
    fp = fingerprint()
    assert fp["torch"] and fp["cpu_capability"] and fp["cpu_model"] and fp["blas_info"]
    refs = load_references()
    assert refs and all(set(r["fingerprint"]) == set(fp) for r in refs)  # every stored key is still recorded
    runs = {"m": {"R": [[1.0]], "tensors": {}, "train": []}}
    other = {**fp, "cpu_model": "another CPU"}
    a, b = {"fingerprint": fp, "runs": runs}, {"fingerprint": other, "runs": {"m": {**runs["m"], "R": [[2.0]]}}}
    assert matching([a, b], other) is b and matching([a], other) is None
    assert shared_R([a, {**b, "runs": runs}]) == {"m": [[1.0]]} and shared_R([a, b]) is None and shared_R([]) is None
