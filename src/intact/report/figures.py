"""Every figure of stored runs: the paper's figures and three diagnostics no other codebase draws, per
benchmark, PNG + PDF, and the default run's and the studies' figures, drawn by the same functions, from stored
results only (read and checked by :func:`intact.results.read_run`):

* ``aa_evolution``: AA after each task, one line per method, markers, ±1 std band over seeds (also the default
  run's ``default_run_aa_evolution.png`` and the main study's); a method and its ``+intact`` share a colour
  (:func:`styles`);
* ``sensitivity``: the paper's three panels (λ_IntDrift, λ_Var, λ_Feat), AA evolution per λ value (the
  sensitivity study: one panel per swept λ, together and each alone);
* ``certificate``: the worst-case |logit drift| of the head inside the previous hypercube after each task
  (the sound bound) beside the largest drift seen at points sampled in the box;
* ``hypercube``: the cumulative hypercube's log-volume and mean width after each task;
* ``feat_gate``: the share of the batch passing the L_Feat gate, per task (paper: samples whose teacher
  feature lies in the box; the authors' code: (sample, neuron) elements of the student feature).

Output files are byte-identical for identical inputs (no timestamps in PNG or PDF metadata).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from intact.rehearsal import banner  # noqa: E402
from intact.report.paper import benchmark_title  # noqa: E402
from intact.report.plots import write_figure  # noqa: E402
from intact.results import StoredResults  # noqa: E402
from intact.naming import baseline, format_value, parse_method_name  # noqa: E402
from intact.studies import sensitivity_grid  # noqa: E402

SENSITIVITY_PANELS = ("lambda_intdrift", "lambda_var", "lambda_feat")  # the paper's order
_LAMBDA = {"lambda_intdrift": r"$\lambda_{IntDrift}$", "lambda_var": r"$\lambda_{Var}$",
           "lambda_feat": r"$\lambda_{Feat}$",
           "lambda_align": r"$\lambda_{Align}$"}
_MARKERS = "osD^vP<>Xph"
# tab10 without its grey (kept for the reference-code InTAct), then four more: a main study of 13 methods gets 13
# distinguishable colours
_PALETTE = [c for j, c in enumerate(plt.get_cmap("tab10").colors) if j != 7] + ["#000080", "#808000", "#00a0a0",
                                                                                "#800000"]
#: InTAct as the paper draws it (black, stars), and the reference-code form (dash-dot grey: dashed says "without
#: InTAct" in these figures, dotted "sampled" in the certificate's)
_FIXED = {"coda_p+intact": {"color": "black", "marker": "*", "ms": 9, "lw": 2.0, "zorder": 5},
          "coda_p+intact@preset=reference": {"color": "0.45", "marker": "*", "ms": 8, "ls": "-.", "lw": 1.6,
                                             "zorder": 4}}
#: how a run drawn beside its InTAct form looks (:func:`styles`); a legend explains it when it draws one
_WITHOUT_INTACT = {"ls": "--", "mfc": "white"}


def _family(method: str) -> tuple:
    """A run's name without its ``+intact``: a method and the same method with InTAct are one family."""
    name = parse_method_name(method)
    return name.base, name.disabled, name.overrides


def styles(methods: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each run's line style: :data:`_FIXED`'s, or its family's colour and marker (one per family, in order, so
    a figure of up to 13 families repeats none); a run drawn beside its InTAct form (:func:`intact.naming.baseline`,
    the one pairing rule) is dashed with hollow markers."""
    drawn = [m for m in dict.fromkeys(methods) if m not in _FIXED]
    families = list(dict.fromkeys(_family(m) for m in drawn))
    paired = {baseline(m) for m in methods}
    out = {m: dict(st) for m, st in _FIXED.items() if m in methods}
    for m in drawn:
        i = families.index(_family(m))
        out[m] = {"color": _PALETTE[i % len(_PALETTE)], "marker": _MARKERS[i % len(_MARKERS)], "ms": 5, "lw": 1.4}
        if m in paired:
            out[m].update(_WITHOUT_INTACT)
    return out


def _empty(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, color="0.35", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _band(ax: plt.Axes, x: np.ndarray, curves: np.ndarray, label: str, st: Mapping[str, Any],
          log: bool = False) -> None:
    """Mean line and ±1 std band over seeds (rows); on a log axis both in log10 (a geometric mean), so the
    band never reaches below zero."""
    values = np.log10(curves) if log else curves
    mean = np.nanmean(values, axis=0)
    std = np.nanstd(values, axis=0, ddof=1) if len(values) > 1 else np.zeros_like(mean)
    lo, mid, hi = (10 ** v for v in (mean - std, mean, mean + std)) if log else (mean - std, mean, mean + std)
    ax.plot(x, mid, label=label, **st)
    ax.fill_between(x, lo, hi, color=st["color"], alpha=0.15, lw=0)


def _task_axis(ax: plt.Axes, names: Sequence[str], first: int = 0) -> None:
    ticks = np.arange(first + 1, len(names) + 1)
    ax.set_xticks(ticks)
    rotate = len(names) > 6
    ax.set_xticklabels([f"{i}\n{names[i - 1]}" if not rotate else f"{i} {names[i - 1]}" for i in ticks],
                       fontsize=8, rotation=60 if rotate else 0, ha="right" if rotate else "center")
    ax.set_xlabel("after task")
    ax.grid(alpha=0.3)


def _legend(ax: plt.Axes, drawn: Sequence[str], style: Mapping[str, Mapping[str, Any]], title: str = "",
            extra: int = 0) -> None:
    """The legend of the runs ``drawn`` in ``style`` (:func:`styles`), and ``extra`` other entries; its title says
    what a dashed line means when one of them is dashed: a figure explains only what it shows."""
    n = len(drawn) + extra
    if not n:
        return
    dashed = any(_WITHOUT_INTACT.items() <= style[m].items() for m in drawn)
    title = "\n".join(t for t in (title, "dashed, hollow: without InTAct" if dashed else "") if t) or None
    kw = {"title": title, "title_fontsize": 8}
    ax.legend(fontsize=8, **kw) if n <= 6 else ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                                                         **kw)


def aa_evolution(stored: StoredResults, benchmark: str, methods: Sequence[str], paths: Sequence[str | Path],
                 title: str | None = None) -> None:
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    drawn, names, style = [], [], styles(methods)
    for m in methods:
        runs = stored.select(benchmark, m)
        if not runs:
            continue
        curves = np.array([r.metrics["aa_evolution"] for r in runs], dtype=float)
        names = runs[0].metrics["task_names"]
        _band(ax, np.arange(1, curves.shape[1] + 1), curves, f"{m} ({curves[:, -1].mean():.1f}, n={len(runs)})",
              style[m])
        drawn.append(m)
    if drawn:
        _task_axis(ax, names)
        ax.set_ylabel("AA over the tasks seen so far (%)")
        _legend(ax, drawn, style, title="method (final AA, seeds)")
        _note_below(ax, unstored(stored, benchmark, {m: m for m in methods}))
    else:
        _empty(ax, f"no stored runs on {benchmark} yet")
    ax.set_title(title or f"AA evolution on {benchmark_title(benchmark)} (mean ± 1 std over seeds)")
    write_figure(fig, paths, banner(stored.is_rehearsal))


def sensitivity(stored: StoredResults, benchmark: str, spec: Mapping[str, Any] | None, paths: Sequence[str | Path],
                keys: Sequence[str] = SENSITIVITY_PANELS) -> None:
    """One panel per swept key of ``keys`` (the paper's three by default): AA evolution per value."""
    grid = sensitivity_grid(spec) if spec else {}
    fig, axes = plt.subplots(1, len(keys), figsize=(5.0 * len(keys), 4.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        ax.set_title(f"Sensitivity to {_LAMBDA.get(key, key)} on {benchmark_title(benchmark)}")
        points = grid.get(key, {})
        cmap = plt.get_cmap("viridis")
        drawn, names = 0, []
        for j, (value, name) in enumerate(sorted(points.items())):
            runs = stored.select(benchmark, name)
            if not runs:
                continue
            curves = np.array([r.metrics["aa_evolution"] for r in runs], dtype=float)
            names = runs[0].metrics["task_names"]
            st = {"color": cmap(j / max(len(points) - 1, 1)), "marker": _MARKERS[j % len(_MARKERS)], "ms": 4, "lw": 1.4}
            _band(ax, np.arange(1, curves.shape[1] + 1), curves,
                  f"{format_value(value)} ({curves[:, -1].mean():.1f}, n={len(runs)})", st)
            drawn += 1
        if drawn:
            _task_axis(ax, names)
            ax.set_ylabel("AA over the tasks seen so far (%)")
            ax.legend(fontsize=7, title=f"{_LAMBDA.get(key, key)} (final AA, seeds)", title_fontsize=8)
            labels = {f"{key} = {format_value(value)}": name for value, name in sorted(points.items())}
            _note_below(ax, unstored(stored, benchmark, labels, width=60))
        else:
            _empty(ax, "not in the sensitivity study" if key not in grid else "no stored runs yet")
    fig.tight_layout()
    write_figure(fig, paths, banner(stored.is_rehearsal))


def _per_task(stored: StoredResults, benchmark: str, methods: Sequence[str], value: Callable[[Any, int], float | None]):
    """method -> (task names, seeds x tasks array with NaN where a task has no value)."""
    out = {}
    for m in methods:
        runs = stored.select(benchmark, m)
        if not runs:
            continue
        T = runs[0].metrics["num_tasks"]
        arr = np.array([[np.nan if (v := value(r, t)) is None else v for t in range(T)] for r in runs], dtype=float)
        arr[~np.isfinite(arr)] = np.nan   # an Inf is left out of the mean too, and named by :func:`not_drawn`
        if np.isfinite(arr).any():
            out[m] = (runs[0].metrics["task_names"], arr)
    return out


def unstored(stored: StoredResults, benchmark: str, runs: Mapping[str, str], width: int = 110) -> str:
    """The line under a figure that names the declared runs (``runs``: label -> run name) with no stored run on
    ``benchmark`` (a results tree still being filled, read by the paper figures): a figure never leaves a declared
    run out silently; empty where every one is stored."""
    missing = [label for label, name in runs.items() if not stored.select(benchmark, name)]
    return textwrap.fill(f"not drawn (no stored runs yet): {', '.join(missing)}", width) if missing else ""


def not_drawn(stored: StoredResults, benchmark: str, methods: Sequence[str], data: Mapping[str, Any], why: str,
              first: int = 0) -> str:
    """The lines under a per-task diagnostic that name the ``methods`` with no stored run on ``benchmark``
    (:func:`unstored`), those with runs that record no value for it (``data``: :func:`_per_task`'s), with ``why``,
    and each point from task ``first`` on that averages fewer seeds than its method has runs (a value missing or
    not finite): a figure never leaves a run out silently; empty where none is left out."""
    missing = [m for m in methods if m not in data and stored.select(benchmark, m)]
    fewer = [f"{m} after task {t + 1} ({n} of {len(arr)})" for m, (_, arr) in data.items()
             for t, n in enumerate(np.isfinite(arr).sum(axis=0)) if t >= first and n < len(arr)]
    lines = [unstored(stored, benchmark, {m: m for m in methods}),
             f"not drawn ({why}): {', '.join(missing)}" if missing else "",
             f"fewer seeds (a value missing or not finite): {', '.join(fewer)}" if fewer else ""]
    return "\n".join(textwrap.fill(line, 110) for line in lines if line)


def _note_below(ax: plt.Axes, text: str) -> None:
    """``text`` under the x label (the rotated task names reach far below the axes)."""
    if text.strip():
        ax.annotate(text.strip(), xy=(0.5, 0), xycoords=ax.xaxis.label, xytext=(0, -8), textcoords="offset points",
                    ha="center", va="top", fontsize=8, color="0.3")


def _diagnostic(ax: plt.Axes, data: Mapping[str, Any], style: Mapping[str, Mapping[str, Any]], ylabel: str,
                first: int = 0, log: bool = False, dotted: Mapping[str, Any] | None = None) -> None:
    """Each run's per-task value (``data``: :func:`_per_task`'s, in the figure's order) as a line in its ``style``
    and its band over seeds; ``dotted``: a second value per run, drawn dotted in its colour (the certificate's
    sampled drift)."""
    names = []
    for m, value in data.items():
        names, arr = value
        x = np.arange(1, arr.shape[1] + 1)[first:]
        _band(ax, x, arr[:, first:], m, style[m], log=log)
        if dotted and m in dotted:
            d = dotted[m][1][:, first:]
            ax.plot(x, 10 ** np.nanmean(np.log10(d), 0) if log else np.nanmean(d, 0), color=style[m]["color"],
                    ls=":", lw=1.2)
    if not names:
        _empty(ax, "no stored runs record this yet")
        return
    _task_axis(ax, names, first)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")


def certificate(stored: StoredResults, benchmark: str, methods: Sequence[str], paths: Sequence[str | Path]) -> None:
    cert = _per_task(stored, benchmark, methods, lambda r, t: r.metrics["certificate"][t])
    sampled = _per_task(stored, benchmark, methods, lambda r, t: r.metrics["sampled_drift"][t])
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    style = styles(methods)
    _diagnostic(ax, cert, style, "max |logit drift| in the previous hypercube", first=1, log=True, dotted=sampled)
    if cert:
        ax.plot([], [], color="0.3", ls=":", label="dotted: largest drift at 4,096 sampled points")
        _legend(ax, list(cert), style, extra=1)
    ax.set_title(f"Certificate after each task on {benchmark_title(benchmark)}\n(sound bound; geometric mean, ±1 std "
                 "of log10 over seeds)")
    _note_below(ax, not_drawn(stored, benchmark, methods, cert, "no certificate recorded", first=1))
    write_figure(fig, paths, banner(stored.is_rehearsal))


def hypercube(stored: StoredResults, benchmark: str, methods: Sequence[str], paths: Sequence[str | Path]) -> None:
    vol = _per_task(stored, benchmark, methods, lambda r, t: r.metrics["hypercube_log_volume"][t])
    width = _per_task(stored, benchmark, methods, lambda r, t: r.metrics["hypercube_mean_width"][t])
    fig, axes = plt.subplots(1, 2, figsize=(13.0, 4.2))
    style = styles(methods)
    _diagnostic(axes[0], vol, style, "log-volume (sum of log widths)")
    axes[0].set_title(f"Cumulative hypercube of the [CLS] feature: log-volume ({benchmark_title(benchmark)})")
    _diagnostic(axes[1], width, style, "mean width per neuron")
    axes[1].set_title("Cumulative hypercube: mean width")
    _legend(axes[1], list(width), style)
    _note_below(axes[0], not_drawn(stored, benchmark, methods, vol, "no hypercube recorded"))
    fig.tight_layout()
    write_figure(fig, paths, banner(stored.is_rehearsal))


def _gate(r: Any, t: int) -> float | None:
    """Mean over the task's epochs of the gate's pass fraction (%), from train.json."""
    if t >= len(r.trains):
        return None
    vals = [e["feat_gate"] for e in r.trains[t]["epochs"] if e.get("feat_gate") is not None]
    return 100.0 * float(np.mean(vals)) if vals else None


def feat_gate(stored: StoredResults, benchmark: str, methods: Sequence[str], paths: Sequence[str | Path]) -> None:
    gate = _per_task(stored, benchmark, methods, _gate)
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    style = styles(methods)
    _diagnostic(ax, gate, style, "passing the L_Feat gate (%)", first=1)
    if gate:
        ax.set_ylim(-3, 103)
        _legend(ax, list(gate), style)
    ax.set_title(f"L_Feat gate pass fraction per task on {benchmark_title(benchmark)}")
    _note_below(ax, "paper gate: share of samples whose teacher feature lies in the box\n"
                    "reference-code gate: share of (sample, neuron) elements of the student feature in the box\n"
                    + not_drawn(stored, benchmark, methods, gate, "no gate: runs without InTAct have none", first=1))
    write_figure(fig, paths, banner(stored.is_rehearsal))


def paper_figures(stored: StoredResults, benchmark: str, methods: Sequence[str],
                  sensitivity_spec: Mapping[str, Any] | None,
                  outputs: Mapping[str, Sequence[str | Path]]) -> None:
    """Every figure of :data:`intact.plan.PAPER_FIGURES` for ``benchmark``; ``outputs``: figure -> its PNG / PDF
    paths."""
    aa_evolution(stored, benchmark, methods, outputs["aa_evolution"])
    sensitivity(stored, benchmark, sensitivity_spec, outputs["sensitivity"])
    certificate(stored, benchmark, methods, outputs["certificate"])
    hypercube(stored, benchmark, methods, outputs["hypercube"])
    feat_gate(stored, benchmark, methods, outputs["feat_gate"])
