"""Metrics on hand-built accuracy matrices (R[i, j]: task i after training task j)."""

import numpy as np
import pytest

from intact import metrics as M

R = np.array([
    [90.0, 80.0, 70.0],
    [20.0, 85.0, 60.0],
    [10.0, 30.0, 75.0],
])


def test_average_accuracy_and_evolution():
    assert M.average_accuracy(R) == pytest.approx((70 + 60 + 75) / 3)
    np.testing.assert_allclose(M.aa_evolution(R), [90.0, (80 + 85) / 2, (70 + 60 + 75) / 3])
    assert M.caa(R) == pytest.approx(np.mean([90.0, 82.5, 205 / 3]))
    assert M.weighted_average_accuracy(R, [1, 1, 2]) == pytest.approx((70 + 60 + 150) / 4)


def test_forgetting_definitions_differ_and_are_named():
    # max-minus-final: task0 max(90, 80) - 70 = 20; task1 max(85) - 60 = 25 -> 22.5
    assert M.forgetting_max(R) == pytest.approx(22.5)
    # one-step: step1 mean(90-80) = 10; step2 mean(80-70, 85-60) = 17.5 -> 13.75
    assert M.forgetting_one_step(R) == pytest.approx(13.75)


def test_forgetting_max_uses_best_state_after_learning():
    R2 = np.array([[50.0, 90.0, 40.0], [95.0, 60.0, 60.0], [0.0, 0.0, 50.0]])
    # task0: max over j in [0, 1] = 90 -> 50; task1: max over j in [1] = 60 -> 0 (95 before learning it is ignored)
    assert M.forgetting_max(R2) == pytest.approx(25.0)


def test_bwt_and_fwt():
    assert M.bwt(R) == pytest.approx(((70 - 90) + (60 - 85)) / 2)
    assert M.fwt(R, np.array([10.0, 10.0, 10.0])) == pytest.approx(((20 - 10) + (30 - 10)) / 2)


def test_no_forgetting_matrix():
    P = np.full((4, 4), 80.0)
    assert M.forgetting_max(P) == 0 and M.forgetting_one_step(P) == 0 and M.bwt(P) == 0
    s = M.summarize(P, sizes=np.ones(4), num_classes=10)
    assert s["aa"] == 80 and s["fwt_vs_chance"] == pytest.approx(70.0)


def test_single_task_and_bad_shapes():
    one = np.array([[42.0]])
    assert M.average_accuracy(one) == 42 and M.forgetting_max(one) == 0 and M.bwt(one) == 0
    with pytest.raises(ValueError):
        M.average_accuracy(np.zeros((2, 3)))


def test_forgetting_definitions_differ_only_where_they_say():
    """Chaudhry's max stops before the last task (can be < 0); Mammoth's includes it (>= 0); Avalanche's
    first-minus-final is -BWT. Brute force over random matrices."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        T = int(rng.integers(2, 6))
        A = rng.uniform(0, 100, (T, T))
        chaudhry = np.mean([max(A[i, j] for j in range(i, T - 1)) - A[i, T - 1] for i in range(T - 1)])
        mammoth = np.mean([max(A[i, j] for j in range(i, T)) - A[i, T - 1] for i in range(T - 1)])
        assert M.forgetting_max(A) == pytest.approx(chaudhry) and M.forgetting_mammoth(A) == pytest.approx(mammoth)
        assert M.forgetting_mammoth(A) >= 0 and M.forgetting_mammoth(A) >= M.forgetting_max(A)
        assert M.forgetting_first_final(A) == pytest.approx(-M.bwt(A))
    improving = np.array([[50.0, 60.0], [0.0, 70.0]])                   # task 0 ends at its best
    assert M.forgetting_max(improving) == -10.0 and M.forgetting_mammoth(improving) == 0.0
    assert "forgetting_mammoth" in M.summarize(improving)


# ---- statistics over seeds: Student's t interval of a mean and of paired differences -----------------------

#: two-sided 95 % critical values t_{0.975, df} as printed in any t table (3 decimals)
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 10: 2.228, 30: 2.042, 100: 1.984}


def test_t_quantile_matches_the_printed_table():
    for df, t in T_TABLE.items():
        assert M.t_quantile(0.975, df) == pytest.approx(t, abs=5e-4), df
        assert M.t_quantile(0.025, df) == pytest.approx(-t, abs=5e-4)
    assert M.t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-12) and M.t_cdf(0.0, 3) == 0.5


def test_paired_interval_by_hand():
    """d = 3, 0.5, 4: mean 2.5, sd sqrt(((0.5)^2 + 2^2 + 1.5^2) / 2) = sqrt(3.25), half-width 4.303 sqrt(3.25 / 3)."""
    p = M.Paired.of({0: 53.0, 1: 52.5, 2: 58.0, 3: 1.0}, {0: 50.0, 1: 52.0, 2: 54.0})
    assert p.seeds == (0, 1, 2) and p.diffs == (3.0, 0.5, 4.0) and (p.better, p.worse) == (3, 0)
    assert (p.stat.mean, p.stat.std, p.stat.n) == pytest.approx((2.5, 3.25 ** 0.5, 3))
    lo, hi = p.interval()
    half = 4.303 * (3.25 / 3) ** 0.5                     # = 4.4786...
    assert (lo, hi) == pytest.approx((2.5 - half, 2.5 + half), abs=1e-3)
    # one seed: no interval (t has no degrees of freedom); all differences equal: the point itself
    assert M.Paired.of({0: 2.0}, {0: 1.0}).interval() is None
    assert M.Paired.of({0: 3.0, 1: 4.0}, {0: 1.0, 1: 2.0}).interval() == (2.0, 2.0)
    tie = M.Paired.of({0: 1.0, 1: 2.0}, {0: 1.0, 1: 3.0})
    assert (tie.better, tie.worse) == (0, 1)              # a difference of exactly 0 is neither
    assert M.Paired.of({0: 1.0}, {1: 1.0}) is None and M.Stat.of([]) is None


def test_intervals_agree_with_scipy_where_it_is_installed():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 9, 29, 200):
        for q in (0.6, 0.9, 0.975, 0.995, 0.9995):
            assert M.t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-10), (q, df)
        for x in (-7.0, -1.5, 0.2, 3.0):
            assert M.t_cdf(x, df) == pytest.approx(stats.t.cdf(x, df), abs=1e-12)
    values = [61.2, 58.9, 64.0, 60.3, 59.7]
    s = M.Stat.of(values)
    want = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert s.interval() == pytest.approx(want, rel=1e-12)
