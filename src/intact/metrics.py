"""Continual-learning metrics from the accuracy matrix.

``R[i, j]`` is the top-1 accuracy (%) on task ``i``'s test set after training task ``j``
(rows: evaluated task, columns: training step), 0-indexed, ``T`` tasks. Every function takes the
full ``T x T`` matrix (entries with ``j < i`` are the accuracy on tasks not yet trained on; in
domain-incremental learning they are meaningful, see :func:`fwt`).
"""

from __future__ import annotations

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


#: every forgetting definition reported, by its metrics.json key, with the words the notes use for it
FORGETTING_DEFINITIONS = {
    "forgetting_max": "Forgetting (max-final, Chaudhry et al.; the default): mean over tasks i < T of "
                      "max_{i ≤ j ≤ T−1} R[i, j] − R[i, T] (tasks 1-indexed; the max stops before the last task, "
                      "so it can be negative)",
    "forgetting_mammoth": "Forgetting (Mammoth): the same with the max including the last task (j ≤ T), so it is ≥ 0",
    "forgetting_first_final": "Forgetting (Avalanche): mean over tasks i < T of R[i, i] − R[i, T] = −BWT",
    "forgetting_one_step": "Forgetting (one-step, CODA-Prompt): the mean drop on learned tasks per new task",
}


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
