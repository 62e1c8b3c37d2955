"""Continual-learning metrics from the accuracy matrix.

``R[i, j]`` is the top-1 accuracy (%) on task ``i``'s test set after training task ``j``
(rows: evaluated task, columns: training step), 0-indexed, ``T`` tasks. Every function takes the
full ``T x T`` matrix (entries with ``j < i`` are the accuracy on tasks not yet trained on; in
domain-incremental learning they are meaningful, see :func:`fwt`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Mapping, Sequence

import numpy as np


def _check(R: np.ndarray) -> np.ndarray:
    R = np.asarray(R, dtype=float)
    if R.ndim != 2 or R.shape[0] != R.shape[1] or R.shape[0] == 0:
        raise ValueError(f"R must be a non-empty square matrix, got shape {R.shape}")
    return R


def average_accuracy(R: np.ndarray) -> float:
    """AA = (1/T) sum_i R[i, T-1]: the unweighted mean over tasks after the last task."""
    R = _check(R)
    return float(R[:, -1].mean())


def weighted_average_accuracy(R: np.ndarray, sizes: np.ndarray) -> float:
    """AA weighted by test-set size (accuracy on the pooled test set)."""
    R = _check(R)
    w = np.asarray(sizes, dtype=float)
    return float((R[:, -1] * w).sum() / w.sum())


def aa_evolution(R: np.ndarray) -> np.ndarray:
    """AA_j = mean_{i <= j} R[i, j]: average accuracy over the tasks seen so far, after each task."""
    R = _check(R)
    return np.array([R[: j + 1, j].mean() for j in range(R.shape[0])])


def caa(R: np.ndarray) -> float:
    """Cumulative average accuracy: the mean of the AA evolution."""
    return float(aa_evolution(R).mean())


def forgetting_max(R: np.ndarray) -> float:
    """Max-minus-final forgetting (Chaudhry et al.): mean_{i<T-1} max_{i<=j<T-1} R[i, j] - R[i, T-1].

    The maximum runs over the states *after* task ``i`` was learned and *before* the last one (j <= T-2),
    so the value can be negative (a task that ends better than ever before); 0 for a single task.
    """
    R = _check(R)
    T = R.shape[0]
    if T < 2:
        return 0.0
    return float(np.mean([R[i, i : T - 1].max() - R[i, T - 1] for i in range(T - 1)]))


def forgetting_mammoth(R: np.ndarray) -> float:
    """Mammoth's ``forgetting``: mean_{i<T-1} max_{i<=j<=T-1} R[i, j] - R[i, T-1].

    As :func:`forgetting_max` but the maximum includes the final state, so every term and the mean are >= 0
    (equal to :func:`forgetting_max` where no task ends at its best).
    """
    R = _check(R)
    T = R.shape[0]
    if T < 2:
        return 0.0
    return float(np.mean([R[i, i:].max() - R[i, T - 1] for i in range(T - 1)]))


def forgetting_first_final(R: np.ndarray) -> float:
    """Avalanche's stream "forgetting": mean_{i<T-1} (R[i, i] - R[i, T-1]), the accuracy just after learning
    a task minus the final one; exactly ``-bwt(R)``."""
    return -bwt(R)


def forgetting_one_step(R: np.ndarray) -> float:
    """CODA-Prompt's one-step forgetting: mean over steps j >= 1 of mean_{i<j} (R[i, j-1] - R[i, j]).

    The average drop on already-learned tasks caused by learning one more task.
    """
    R = _check(R)
    T = R.shape[0]
    if T < 2:
        return 0.0
    return float(np.mean([np.mean(R[:j, j - 1] - R[:j, j]) for j in range(1, T)]))


def bwt(R: np.ndarray) -> float:
    """Backward transfer (Lopez-Paz & Ranzato): mean_{i<T-1} (R[i, T-1] - R[i, i]). Negative = forgetting."""
    R = _check(R)
    T = R.shape[0]
    if T < 2:
        return 0.0
    return float(np.mean([R[i, T - 1] - R[i, i] for i in range(T - 1)]))


def fwt(R: np.ndarray, baseline: np.ndarray) -> float:
    """Forward transfer: mean_{i>=1} (R[i, i-1] - b_i), accuracy on task i before training on it
    relative to a reference ``b`` (e.g. chance level or an untrained model)."""
    R = _check(R)
    T = R.shape[0]
    b = np.broadcast_to(np.asarray(baseline, dtype=float), (T,))
    if T < 2:
        return 0.0
    return float(np.mean([R[i, i - 1] - b[i] for i in range(1, T)]))


def summarize(R: np.ndarray, sizes: np.ndarray | None = None, num_classes: int | None = None) -> dict[str, object]:
    """Every metric of one run (FWT against chance level ``100 / num_classes``)."""
    R = _check(R)
    out: dict[str, object] = {
        "aa": average_accuracy(R),
        "aa_evolution": aa_evolution(R).tolist(),
        "caa": caa(R),
        "forgetting_max": forgetting_max(R),
        "forgetting_one_step": forgetting_one_step(R),
        "forgetting_mammoth": forgetting_mammoth(R),
        "bwt": bwt(R),
    }
    if sizes is not None:
        out["aa_weighted"] = weighted_average_accuracy(R, sizes)
    if num_classes:
        out["fwt_vs_chance"] = fwt(R, np.full(R.shape[0], 100.0 / num_classes))
    return out


# --------------------------------------------------------------------------------------------------
# Over seeds: mean ± sample std, the 95 % interval of a mean, and paired differences (every table's statistics)

#: the confidence level of every interval the reports show
CONFIDENCE = 0.95


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo <= 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Stat:
    """mean ± sample std (ddof=1; 0 for one value) over ``n`` values, and the Student's t interval of the mean."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat | None:
        if not len(values):
            return None
        v = np.asarray(values, dtype=float)
        return cls(float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0, len(v))

    def interval(self, level: float = CONFIDENCE) -> tuple[float, float] | None:
        """mean ± t_{(1+level)/2, n-1} · std / sqrt(n); None for one value (t has no degrees of freedom).
        A zero std gives the point [mean, mean]: every value was the same."""
        if self.n < 2:
            return None
        half = t_quantile((1.0 + level) / 2.0, self.n - 1) * self.std / math.sqrt(self.n)
        return self.mean - half, self.mean + half


@dataclass(frozen=True)
class Paired:
    """Per-seed differences d_s = a(s) - b(s) over the seeds both runs have (sorted), their :class:`Stat`
    (so the interval is Student's t on the paired differences) and on how many seeds a is better / worse
    (a difference of exactly 0 counts as neither)."""

    seeds: tuple[int, ...]
    diffs: tuple[float, ...]
    stat: Stat

    @classmethod
    def of(cls, a: Mapping[int, float], b: Mapping[int, float]) -> Paired | None:
        seeds = tuple(sorted(set(a) & set(b)))
        if not seeds:
            return None
        diffs = tuple(float(a[s]) - float(b[s]) for s in seeds)
        return cls(seeds, diffs, Stat.of(diffs))

    @property
    def better(self) -> int:
        return sum(d > 0 for d in self.diffs)

    @property
    def worse(self) -> int:
        return sum(d < 0 for d in self.diffs)

    def interval(self, level: float = CONFIDENCE) -> tuple[float, float] | None:
        return self.stat.interval(level)
