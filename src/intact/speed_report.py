"""The report of ``intact speed``: the paired step-time ratios and the table (intact.speed measures the rows)."""

from __future__ import annotations

import statistics


def ratio_pairs(rows: list[dict]) -> list[tuple[str, tuple, tuple]]:
    """The step-time ratios the table reports for the rows measured: (label, numerator row, denominator row):
    ``m+intact / m`` per cache setting, then cached / uncached per method, for every method given."""
    have = {(r["method"], r["cache"]) for r in rows}
    methods = list(dict.fromkeys(r["method"] for r in rows))
    pairs = [(f"{m} / {m.removesuffix('+intact')} step ({'cached' if c else 'uncached'})", (m, c),
              (m.removesuffix("+intact"), c))
             for m in methods if m.endswith("+intact") for c in (True, False)]
    pairs += [(f"{m} cached / uncached step", (m, True), (m, False)) for m in methods]
    return [(label, num, den) for label, num, den in pairs if num in have and den in have]


def ratios(rows: list[dict], paired: bool) -> dict[str, dict[str, float]]:
    """Each ratio of :func:`ratio_pairs`: of the medians, or (``paired``) the median, min and max of the
    per-step ratios (step i of one row over step i of the other, taken moments apart)."""
    by = {(r["method"], r["cache"]): r for r in rows}
    out = {}
    for label, num, den in ratio_pairs(rows):
        if paired:
            per_step = [a / b for a, b in zip(by[num]["step_times_s"], by[den]["step_times_s"])]
            out[label] = {"median": statistics.median(per_step), "min": min(per_step), "max": max(per_step)}
        else:
            out[label] = {"median": by[num]["step_s"] / by[den]["step_s"]}
    return out


def format_table(rows: list[dict], paired: bool = False) -> str:
    head = (f"{'method':<16}{'cache':>6}{'step_s':>9}{'min':>8}{'max':>8}{'passes':>7}{'eval_s':>8}{'min':>7}{'max':>7}"
            f"{'img/s':>8}{'peak_mb':>9}{'trainable':>11}{'total':>12}{'build_s':>8}{'load':>12}")
    lines = [head, "-" * len(head)]
    for r in rows:
        load = "/".join("?" if v is None else f"{v:.1f}" for v in (r["load_before"], r["load_after"]))
        lines.append(f"{r['method']:<16}{str(r['cache']).lower():>6}{r['step_s']:>9.3f}{r['step_min_s']:>8.3f}"
                     f"{r['step_max_s']:>8.3f}{r['passes_per_step']:>7g}{r['eval_batch_s']:>8.3f}{r['eval_min_s']:>7.3f}"
                     f"{r['eval_max_s']:>7.3f}{r['images_per_s']:>8.1f}{r['peak_mb']:>9.0f}{r['trainable_params']:>11,}"
                     f"{r['total_params']:>12,}{r['cache_build_s']:>8.2f}{load:>12}")
    lines.append("load: 1-minute load average before / after the row; peak_mb: the row's own process (torch included)")
    for label, v in ratios(rows, paired).items():
        extra = f" (per-step ratios {v['min']:.2f}-{v['max']:.2f})" if paired else ""
        lines.append(f"{label}: {v['median']:.2f}{extra}")
    return "\n".join(lines)
