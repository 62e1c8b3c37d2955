"""The paper's tables and figures: its numbers as data (checked against the paper's LaTeX source), the
paper | here | Δ tables on hand-built runs, LaTeX that compiles, efficiency fields, and `snakemake
paper_tables` on a fresh clone (paper columns only, no training)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, snakemake
from intact.metrics import Paired
from intact.naming import baseline, intact_pair, pairs
from intact.report.paper import paper_numbers, stored_results
from intact.plan import PAPER_TABLES
from intact.settings import IntactConfig
from intact.report.paper_tables import paper_tables
from intact.report.settings import report_settings
from intact.report.render import to_latex, write_table
from intact.report.tables import ci_note
from intact.results import StoredResults, StoredRun
from intact.layering import load_file

PAPER_TEX = REPO.parent / "shared/paper/intact-paper.tex"
CONFIG = load_file(REPO / "config.yaml")


def _res(cell: str) -> tuple[float, float]:
    m = re.search(r"\\res\{([\d.]+)\}\{([\d.]+)\}", cell)
    return float(m[1]), float(m[2])


@pytest.mark.skipif(not PAPER_TEX.exists(), reason=f"the paper's source is not at {PAPER_TEX}")
def test_paper_numbers_are_the_papers_tables():
    """Every number of paper_numbers.yaml equals the paper's LaTeX table it names (and nothing is missing)."""
    tex = PAPER_TEX.read_text()
    nums = paper_numbers()
    body = lambda label: tex.split(f"\\label{{{label}}}")[1].split("\\end{tabular}")[0]  # noqa: E731
    rows = {r.split("&")[0].strip().split("\n")[-1].strip(): r
            for r in body("tab:main_results").split("\\\\") if "\\res" in r}
    assert len(rows) == len(nums["main"]["rows"]) == 12
    for row in nums["main"]["rows"]:
        key = {"CPrompt": "Cprompt", "InTAct": "\\textbf{InTAct}"}.get(row["method"], row["method"])
        cells = rows[key].split("&")[2:]
        assert [_res(c) for c in cells] == [tuple(row["aa"][b]) for b in nums["main"]["columns"]], row["method"]
    abl = [r for r in body("tab:ablation_results").split("\\\\") if "checkmark" in r or "times" in r]
    full, *removed = [[c.strip() for c in r.split("&")] for r in abl]
    assert float(re.search(r"[\d.]+", full[4])[0]) == nums["ablation"]["full"]
    for cells, term in zip(removed, ("intdrift", "var", "align", "feat")):
        assert "times" in cells[("intdrift", "var", "align", "feat").index(term)]
        assert (float(cells[4]), float(cells[5])) == (nums["ablation"]["removed"][term],
                                                      nums["ablation"]["delta"][term])
    integ = [r for r in body("appendix:tab_intact_other_prompt_methods").split("\\\\") if "\\res" in r]
    assert [[_res(c) for c in r.split("&")[1:]] for r in integ] == [
        [tuple(row["aa"][b]) for b in nums["integration"]["columns"]] for row in nums["integration"]["rows"]]
    hp = [[c.strip() for c in r.split("&")] for r in body("appendix:tab_prompt_hp").split("\\\\") if "10^" in r]
    value = lambda c: float(c.strip("$")) if "^" not in c else 10.0 ** int(re.search(r"\{(-?\d+)\}", c)[1])  # noqa: E731
    for cells, b in zip(hp, ("domainnet", "imagenet_r", "imagenet_c", "imagenet_mix")):
        row = nums["hyperparameters"]["rows"][b]
        assert [value(c) for c in cells[1:]] == pytest.approx([row["lambda_feat"], row["lambda_intdrift"],
                                                               row["lambda_var"]])
    eff = [[c.strip() for c in r.split("&")] for r in body("tab:efficiency_comparison").split("\\\\") if "\\res" in r]
    assert len(eff) == len(nums["efficiency"]["rows"])
    for cells, row in zip(eff, nums["efficiency"]["rows"]):
        assert (int(cells[1].replace(",", "")), int(cells[2].replace(",", "")), float(cells[3]), float(cells[4])) == (
            row["total_parameters"], row["trainable_parameters"], row["gpu_memory_gb"], row["batch_seconds"])
        assert _res(cells[5]) == tuple(row["aa"])


def _write(tables, out: Path) -> None:
    for name, t in tables.items():
        write_table(t, out / f"{name}.csv", out / f"{name}.md", out / f"{name}.tex")


def test_paper_columns_round_trip_from_the_yaml(tmp_path):
    """With no stored runs every paper cell is the YAML's number (CSV exactly, Markdown/LaTeX as printed)
    and every 'here' cell is '—'."""
    _write(paper_tables(report_settings(CONFIG), StoredResults()), tmp_path)
    nums = paper_numbers()
    main = pd.read_csv(tmp_path / "main.csv")
    for row in nums["main"]["rows"]:
        for b, (mean, std) in row["aa"].items():
            got = main[(main["method"] == row["method"]) & (main["benchmark"] == b)]
            assert (got["paper_mean"].item(), got["paper_std"].item()) == (mean, std)
            assert got["here_mean"].isna().all()
    assert main["here_mean"].isna().all()
    tex, md = (tmp_path / "main.tex").read_text(), (tmp_path / "main.md").read_text()
    assert "74.23 $\\pm$ 0.16" in tex and "85.85 $\\pm$ 0.34" in tex and "**74.23 ± 0.16**" in md
    abl = pd.read_csv(tmp_path / "ablation.csv")
    assert dict(zip(abl["removed"].fillna(""), abl["paper_aa"])) == {"": 74.23, **nums["ablation"]["removed"]}
    assert "70.75" in (tmp_path / "ablation.tex").read_text()
    eff = pd.read_csv(tmp_path / "efficiency.csv")
    assert eff.set_index("method").loc["InTAct", "paper_gpu_memory_gb"] == 18.04
    assert "18.04" in (tmp_path / "efficiency.tex").read_text()
    hp = pd.read_csv(tmp_path / "hyperparameters.csv")
    assert hp[(hp["benchmark"] == "imagenet_r") & (hp["lambda"] == "lambda_intdrift")]["paper"].item() == 1e-3
    # ours: what coda_p+intact resolves to on the embedded benchmark
    feat = hp[(hp["benchmark"] == "digits") & (hp["lambda"] == "lambda_feat")]
    assert feat["ours"].item() == IntactConfig().lambda_feat
    # digits' paper cells are dashes for a benchmark the paper does not tune, not for one configured nowhere
    assert "| digits | — | " in (tmp_path / "hyperparameters.md").read_text()
    assert "— under paper: a benchmark the paper does not tune" in (tmp_path / "hyperparameters.md").read_text()
    for name in PAPER_TABLES:
        text = (tmp_path / f"{name}.md").read_text()
        assert "AA: mean top-1 accuracy" in text and "Forgetting (max-final)" in text and "eed" in text, name


def _run(benchmark, method, seed, aa, *, gate=0.5, T=3):
    metrics = {"aa": aa, "num_tasks": T, "task_names": ["a", "b", "c"][:T], "aa_evolution": [aa + 2, aa + 1, aa][:T],
               "certificate": [None] + [0.1] * (T - 1), "sampled_drift": [None] + [0.05] * (T - 1),
               "hypercube_log_volume": [-10.0] * T, "hypercube_mean_width": [1.0] * T}
    trains = tuple({"epochs": [{"feat_gate": gate}], "seconds": 2.0, "train_batches": 4, "train_images": 100,
                    "total_parameters": 1000, "trainable_parameters": 100, "peak_memory_mb": 512.0,
                    "inference_batch_seconds": 0.01, "device": "cpu"} for _ in range(T))
    return StoredRun(benchmark, method, seed, metrics, trains)


def test_measured_cells_differences_and_paired_wins(tmp_path):
    """Hand-built runs: here = mean ± sample std, Δ = here − paper, paired d_s = A − B per common seed."""
    plain = {0: 50.0, 1: 52.0, 2: 54.0}
    intact = {0: 53.0, 1: 52.5, 2: 58.0}            # d = 3, 0.5, 4: mean 2.5, wins 3 of 3
    runs = [_run("imagenet_r", "coda_p", s, a) for s, a in plain.items()]
    runs += [_run("imagenet_r", "coda_p+intact", s, a) for s, a in intact.items()]
    runs += [_run("digits", "coda_p+intact", 0, 40.0), _run("digits", "coda_p+intact@preset=reference", 0, 43.0)]
    stored = StoredResults(runs)
    tables = paper_tables(report_settings(CONFIG), stored)
    _write(tables, tmp_path)
    main = pd.read_csv(tmp_path / "main.csv").set_index(["run", "benchmark"])
    row = main.loc[("coda_p+intact", "imagenet_r")]
    assert row["here_mean"] == pytest.approx(np.mean(list(intact.values())))
    assert row["here_std"] == pytest.approx(np.std(list(intact.values()), ddof=1))
    assert row["here_seeds"] == 3 and row["delta"] == pytest.approx(row["here_mean"] - 74.23)
    assert np.isnan(main.loc[("coda_p+intact", "domainnet"), "here_mean"])       # not run: '—'
    assert np.isnan(main.loc[("coda_p+intact", "average"), "here_mean"])         # average needs all four
    assert main.loc[("coda_p+intact@preset=reference", "digits"), "here_mean"] == 43.0
    paired = pd.read_csv(tmp_path / "main_paired.csv").set_index(["a", "b", "benchmark"])
    p = paired.loc[("coda_p+intact", "coda_p", "imagenet_r")]
    d = np.array([intact[s] - plain[s] for s in plain])
    assert (p["diff_mean"], p["diff_std"], p["better"], p["seeds"]) == pytest.approx((d.mean(), d.std(ddof=1), 3, 3))
    half = 4.303 * d.std(ddof=1) / 3 ** 0.5                  # t(0.975, 2) from a printed table
    assert (p["ci_low"], p["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half), abs=2e-3)
    assert paired.loc[("coda_p+intact@preset=reference", "coda_p+intact", "digits"), "diff_mean"] == pytest.approx(3.0)
    md = (tmp_path / "main.md").read_text()
    assert "+3.00 / +0.50 / +4.00 | +2.50 | [-1.98, +6.98] | 3 of 3" in md and "Student's t" in md
    # ours beside the paper's mean, with our interval and whether the paper's mean lies inside it
    s = np.array(list(intact.values()))
    lo, hi = s.mean() - 4.303 * s.std(ddof=1) / 3 ** 0.5, s.mean() + 4.303 * s.std(ddof=1) / 3 ** 0.5
    assert (row["here_ci_low"], row["here_ci_high"]) == pytest.approx((lo, hi), abs=2e-3)
    assert row["here_paper_in_ci"] == (lo <= 74.23 <= hi) and f"[{lo:.2f}, {hi:.2f}] out" in md
    assert "in / out: whether the paper's mean lies inside it" in md
    # a table none of whose cells has a paper's mean to compare does not explain in / out
    assert "in / out" not in ci_note(pd.DataFrame({"here_paper_in_ci": [None, None]}))
    assert "in / out" in ci_note(pd.DataFrame({"here_paper_in_ci": [None, False]}))
    # bold marks the best measured cell of a column, never a '—'
    assert f"**{np.mean(list(intact.values())):.2f} ± " in md and "**—**" not in md
    eff = pd.read_csv(tmp_path / "efficiency.csv").set_index(["benchmark", "run"])
    e = eff.loc[("imagenet_r", "coda_p+intact")]
    assert (e["here_total"], e["here_memory"], e["here_train_batch"],
            e["here_images_per_s"]) == pytest.approx((1000, 0.5, 0.5, 50.0))


def test_no_bold_ranks_a_run_missing_seeds_against_whole_ones(tmp_path):
    """A run still missing a seed is not out-ranked in bold by its baseline's mean over more seeds (here InTAct wins
    on both common seeds, and the baseline's third seed lifts its mean); with the same seeds, the best is bold."""
    runs = [_run("digits", "coda_p", s, a) for s, a in {0: 50.0, 1: 52.0, 2: 60.0}.items()]
    runs += [_run("digits", "coda_p+intact", s, a) for s, a in {0: 51.0, 1: 53.0}.items()]
    runs += [_run("digits", "coda_p+intact-no_var", s, a) for s, a in {0: 50.0, 1: 52.0, 2: 60.0}.items()]
    _write(paper_tables(report_settings(CONFIG), StoredResults(runs)), tmp_path)
    for name in ("main", "ablation"):
        md = (tmp_path / f"{name}.md").read_text()
        assert "54.00 ± 5.29 (n=3)" in md and "52.00 ± 1.41 (n=2)" in md, name
        assert "**54.00 ± 5.29 (n=3)**" not in md and "**52.00 ± 1.41 (n=2)**" not in md, name
        assert "none in digits here" in md or "none in Here (digits) AA" in md, name
    runs.append(_run("digits", "coda_p+intact", 2, 61.0))
    _write(paper_tables(report_settings(CONFIG), StoredResults(runs)), tmp_path)
    md = (tmp_path / "main.md").read_text()
    assert "**55.00 ± 5.29 (n=3)**" in md and "Bold: best per column." in md


def test_pairing_names():
    """One rule pairs a run with its baseline: InTAct and its own settings dropped, every other setting kept."""
    assert baseline("l2p+intact") == "l2p"
    assert baseline("coda_p+intact@preset=reference") == "coda_p"
    assert baseline("coda_p+intact@optim.epochs=10") == "coda_p@optim.epochs=10"
    assert baseline("coda_p+intact@lambda_feat=3,optim.epochs=2,protocol=official") == \
        "coda_p@optim.epochs=2,protocol=official"
    assert baseline("coda_p+intact-no_var") == "coda_p" and baseline("coda_p") is None
    assert intact_pair("l2p@lambda_var=1e-2,lambda_feat=1e-1") == ("l2p", "l2p+intact@lambda_var=1e-2,lambda_feat=1e-1")
    assert intact_pair("ka_prompt@methods.ka_prompt.expert_last=4") == \
        ("ka_prompt@methods.ka_prompt.expert_last=4", "ka_prompt+intact@methods.ka_prompt.expert_last=4")
    got = pairs(["coda_p", "coda_p+intact", "coda_p+intact@preset=reference", "l2p+intact", "coda_p+intact-no_var"])
    assert set(got) == {("coda_p+intact", "coda_p"), ("coda_p+intact@preset=reference", "coda_p+intact"),
                        ("coda_p+intact@preset=reference", "coda_p")}
    # a run with InTAct settings of its own is paired with its baseline even where InTAct at its defaults is absent
    assert pairs(["coda_p", "coda_p+intact@lambda_feat=3"]) == [("coda_p+intact@lambda_feat=3", "coda_p")]
    p = Paired.of({0: 1.0, 1: 0.0, 2: 5.0}, {0: 0.0, 1: 1.0, 3: 9.0})
    assert p.seeds == (0, 1) and p.better == 1 and p.stat.mean == 0.0


TEX_PACKAGES = ["texlive-latex-base", "texlive-latex-recommended"]   # pdflatex + booktabs: ~15 MB of .debs


def _ensure_pdflatex(log: Path) -> str | None:
    """Install pdflatex with Debian's packages where it is missing and we may (root, apt-get); else say why not."""
    if shutil.which("pdflatex"):
        return None
    import os

    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "no pdflatex, and installing it needs root and apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *TEX_PACKAGES]
    with open(log, "a") as out:
        for cmds in ([install], [["apt-get", "update"], install]):   # update only if the cached lists fail
            if all(subprocess.run(c, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  timeout=600).returncode == 0 for c in cmds):
                break
    return None if shutil.which("pdflatex") else f"installing {TEX_PACKAGES} failed (see {log})"


@pytest.mark.slow
def test_a_diagnostic_figure_names_the_runs_it_leaves_out(tmp_path):
    """A run that records no certificate or hypercube (S-Prompts, ESN, CPrompt: nothing shared between domains) is
    named under the figure, with why, instead of missing from it silently; so is a declared method with no stored
    run yet (the paper figures read whatever is stored: before 2026-12-01 it was left out without a word)."""
    from intact.report import figures

    runs = [_run("imagenet_r", "coda_p", s, 50.0) for s in (0, 1)]
    for s in (0, 1):
        run = _run("imagenet_r", "esn", s, 40.0)
        run.metrics.update(certificate=[None] * 3, hypercube_log_volume=[None] * 3, hypercube_mean_width=[None] * 3)
        runs.append(run)
    stored = StoredResults(runs)
    methods = ["coda_p", "esn", "not_run"]
    cert = figures._per_task(stored, "imagenet_r", methods, lambda r, t: r.metrics["certificate"][t])
    assert list(cert) == ["coda_p"]
    assert figures.not_drawn(stored, "imagenet_r", methods, cert, "no certificate recorded", first=1) == \
        "not drawn (no stored runs yet): not_run\nnot drawn (no certificate recorded): esn"
    assert figures.not_drawn(stored, "imagenet_r", ["coda_p"], cert, "no certificate recorded", first=1) == ""
    for figure in (figures.certificate, figures.hypercube, figures.feat_gate):
        path = tmp_path / f"{figure.__name__}.png"
        figure(stored, "imagenet_r", methods, [path])
        assert path.read_bytes().startswith(b"\x89PNG")


def test_the_paper_figures_name_the_declared_runs_not_stored_yet(tmp_path, monkeypatch):
    """The paper figures read whatever is stored: before 2026-12-01 a declared method or a sensitivity value with no
    stored run vanished from the AA evolution and the sensitivity panels without a word (the diagnostics named
    theirs). The note under each axes names them; with every run stored there is no note."""
    from intact.report import figures
    from intact.studies import sensitivity_grid

    notes = []
    monkeypatch.setattr(figures, "_note_below", lambda ax, text: notes.append(text))
    spec = {"method": "coda_p+intact", "grid": {"lambda_var": [1e-3, 1e-2, 1e-1]}}
    grid = sensitivity_grid(spec)["lambda_var"]
    stored = StoredResults([_run("imagenet_r", grid[1e-3], 0, 60.0), _run("imagenet_r", grid[1e-1], 0, 70.0),
                            _run("imagenet_r", "coda_p", 0, 50.0)])
    figures.aa_evolution(stored, "imagenet_r", ["coda_p", "coda_p+intact", "ewc"], [tmp_path / "aa.png"])
    figures.sensitivity(stored, "imagenet_r", spec, [tmp_path / "sens.png"], keys=["lambda_var"])
    assert notes == ["not drawn (no stored runs yet): coda_p+intact, ewc",
                     "not drawn (no stored runs yet): lambda_var = 0.01"]
    notes.clear()
    figures.aa_evolution(stored, "imagenet_r", ["coda_p"], [tmp_path / "aa.png"])
    figures.sensitivity(stored, "imagenet_r", {"method": "coda_p+intact", "grid": {"lambda_var": [1e-3, 1e-1]}},
                        [tmp_path / "sens.png"], keys=["lambda_var"])
    assert notes == ["", ""]


def test_a_diagnostic_figure_names_the_points_that_average_fewer_seeds():
    """A certificate that is missing or not finite for one seed of one task is left out of that point's mean, and
    the note under the figure says so (np.nanmean averaged the other seeds silently; an Inf drew no line)."""
    from intact.report import figures

    runs = [_run("imagenet_r", "coda_p", s, 50.0) for s in (0, 1, 2)]
    runs[1].metrics["certificate"] = [None, float("inf"), 0.1]
    runs[2].metrics["certificate"] = [None, 0.1, float("nan")]
    stored = StoredResults(runs)
    cert = figures._per_task(stored, "imagenet_r", ["coda_p"], lambda r, t: r.metrics["certificate"][t])
    assert np.isfinite(np.nanmean(cert["coda_p"][1][:, 1:], axis=0)).all()
    assert figures.not_drawn(stored, "imagenet_r", ["coda_p"], cert, "no certificate recorded", first=1) == \
        "fewer seeds (a value missing or not finite): coda_p after task 2 (2 of 3), coda_p after task 3 (2 of 3)"
    hypercube = figures._per_task(stored, "imagenet_r", ["coda_p"], lambda r, t: r.metrics["hypercube_log_volume"][t])
    assert figures.not_drawn(stored, "imagenet_r", ["coda_p"], hypercube, "no hypercube recorded") == ""


def test_a_figures_lines_repeat_no_colour_and_pair_each_method_with_its_intact():
    """config.yaml's main study draws 17 runs of 13 families in 13 colours (it drew ESN in L2P's red, CPrompt in L2P +
    InTAct's purple); a method and its +intact share their colour, the one without InTAct dashed and hollow; the
    paper's InTAct keeps its black stars."""
    from intact.report import figures

    methods = load_file(REPO / "config.yaml")["studies"]["main"]["methods"]
    style = figures.styles(methods)
    assert list(style) == [m for m in figures._FIXED if m in methods] + [m for m in methods if m not in figures._FIXED]
    families = {}
    for m in methods:
        if m not in figures._FIXED:
            families.setdefault(baseline(m) or m, set()).add(style[m]["color"])
    assert all(len(c) == 1 for c in families.values()) and len(families) == 13
    assert len({c for cs in families.values() for c in cs}) == 13
    assert style["coda_p+intact"]["color"] == "black" and style["l2p+intact"].get("ls", "-") == "-"
    assert style["l2p"]["ls"] == "--" and style["l2p"]["mfc"] == "white" and style["coda_p"]["ls"] == "--"
    assert "ls" not in style["ewc"] and "ls" not in figures.styles(["coda_p"])["coda_p"]
    # dashed means "without InTAct": only those runs are dashed (the reference-code InTAct is dash-dot)
    assert {m for m, st in style.items() if st.get("ls") == "--"} == {baseline(m) for m in methods} - {None}
    assert figures.styles(["coda_p+intact-no_var", "coda_p+intact"])["coda_p+intact-no_var"]["color"] != "black"


def test_a_legend_explains_dashed_lines_only_when_it_draws_one(monkeypatch):
    """A run without InTAct is drawn dashed and hollow; the legend's title says so only when such a run is drawn,
    not when one was planned (in ``methods``) but has no stored runs."""
    from intact.report import figures

    titles = []

    def legend_title(fig, paths, banner=None):
        titles.append(fig.axes[0].get_legend().get_title().get_text())
        figures.plt.close(fig)

    monkeypatch.setattr(figures, "write_figure", legend_title)
    plain, with_intact = _run("imagenet_r", "coda_p", 0, 50.0), _run("imagenet_r", "coda_p+intact", 0, 52.0)
    methods = ["coda_p", "coda_p+intact"]
    for figure in (figures.aa_evolution, figures.certificate):
        figure(StoredResults([with_intact]), "imagenet_r", methods, [])
        figure(StoredResults([plain, with_intact]), "imagenet_r", methods, [])
    assert ["without InTAct" in t for t in titles] == [False, True, False, True], titles
    assert titles[0].startswith("method (final AA, seeds)")


def test_latex_compiles_or_is_well_formed(tmp_path):
    """Each table's LaTeX compiles with pdflatex where the machine has it (booktabs); the structure is
    checked either way: balanced environments and as many cells per row as the column spec."""
    tables = paper_tables(report_settings(CONFIG), StoredResults([_run("digits", "coda_p", 0, 40.0),
                                                 _run("digits", "coda_p+intact", 0, 41.0)]))
    for name, table in tables.items():
        tex = to_latex(table)
        for env in ("table", "tabular"):
            assert tex.count(f"\\begin{{{env}}}") == tex.count(f"\\end{{{env}}}") >= 1
        for tabular in re.findall(r"\\begin\{tabular\}\{(\w+)\}(.*?)\\end\{tabular\}", tex, re.S):
            spec, body = tabular
            for line in body.split("\\\\")[:-1]:
                line = re.sub(r"\\(toprule|midrule|cmidrule\(lr\)\{[\d-]+\})", "", line).strip()
                spans = sum(int(n) - 1 for n in re.findall(r"\\multicolumn\{(\d+)\}", line))
                assert line.count("&") + 1 + spans == len(spec), (name, line)
        assert "±" not in tex and "—" not in tex and "_" not in tex.replace("\\_", "")
        (tmp_path / f"{name}.tex").write_text(tex)
    why = _ensure_pdflatex(tmp_path / "apt.log")
    if why:
        pytest.skip(f"LaTeX structure checked, not compiled: {why}")
    doc = tmp_path / "doc.tex"
    inputs = "".join(f"\\input{{{name}.tex}}\\clearpage\n" for name in tables)
    doc.write_text("\\documentclass{article}\\usepackage[margin=1.5cm]{geometry}\\usepackage{booktabs,graphicx,amssymb}"
                   f"\\begin{{document}}\n{inputs}\\end{{document}}\n")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 0


def test_efficiency_fields_count_parameters_and_time_inference():
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    from intact.efficiency import efficiency_record

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Linear(4, 4).requires_grad_(False)
            self.head = nn.Linear(4, 2)
            self.teacher = nn.Linear(4, 4)   # a snapshot copy: not part of the model's size

        def predict(self, x):
            return self.head(self.backbone(x))

        def param_groups(self):
            return [{"params": list(self.head.parameters()), "lr": 0.1}]

    data = TensorDataset(torch.randn(40, 4), torch.zeros(40, dtype=torch.long))
    rec = efficiency_record(Toy(), data, 8, torch.device("cpu"), steps=5)
    assert rec["total_parameters"] == 20 + 10 and rec["trainable_parameters"] == 10 and rec["train_batches"] == 5
    assert rec["inference_batch_seconds"] > 0 and rec["device"] == "cpu"
    # one whole batch and a partial one: the warm-up was the only whole batch, and the time came out 0.0
    # (before 2026-12-01); it is timed again, warm
    for n in (8, 12, 15):
        data = TensorDataset(torch.randn(n, 4), torch.zeros(n, dtype=torch.long))
        assert efficiency_record(Toy(), data, 8, torch.device("cpu"), steps=1)["inference_batch_seconds"] > 0, n


def test_an_efficiency_cell_of_records_from_several_machines_is_a_dash_and_says_so(tmp_path):
    """Each task is a job of its own, which may land on another GPU or node: a cell averaged a CPU's RSS with a
    GPU's memory (6.50 ± 9.59 GB) and said only "Devices: NVIDIA H200, cpu" (before 2026-12-01)."""
    from intact.report import paper_efficiency

    runs = [_run("imagenet_r", "coda_p+intact", s, 50.0) for s in (0, 1)]
    runs[1] = dataclasses.replace(runs[1], trains=tuple({**t, "device": "NVIDIA H200", "peak_memory_mb": 18000.0}
                                                        for t in runs[1].trains))
    assert paper_efficiency.machines(runs) == {"cpu on ?", "NVIDIA H200"}
    _write(paper_tables(report_settings(CONFIG), StoredResults(runs)), tmp_path)
    e = pd.read_csv(tmp_path / "efficiency.csv").set_index(["benchmark", "run"]).loc[("imagenet_r", "coda_p+intact")]
    assert np.isnan(e["here_memory"]) and np.isnan(e["here_train_batch"]) and e["here_total"] == 1000
    md = (tmp_path / "efficiency.md").read_text()
    assert "Memory and times '—': measured on more than one machine, InTAct on ImageNet-R (NVIDIA H200, cpu on ?)" in md


def test_stored_results_skip_runs_of_an_older_config(tmp_path):
    from intact.config import resolve_run
    from stored_run import write_run

    cfg = load_file(REPO / "config.yaml")
    for seed, h in ((0, resolve_run(cfg, "digits", "coda_p", 0).hash()), (1, "stale")):
        write_run(tmp_path / f"runs/digits/coda_p/seed{seed}", [[50.0, 40.0], [10.0, 60.0]], seed=seed, config_hash=h)
    stored = stored_results(report_settings(cfg), tmp_path)
    assert [(r.method, r.seed) for r in stored.runs] == [("coda_p", 0)] and stored.stale == ["digits/coda_p/seed1"]
    assert stored.values("digits", "coda_p") == {0: 50.0}


@pytest.mark.slow
def test_the_report_settings_are_the_validated_runs_and_reach_the_job_as_built():
    """What the report jobs read of a paper config: built from the runs its validation resolved, it equals a fresh
    resolution, its hashes are the runs' own, and its recorded form (the params entry) builds back to it in the job
    (intact.runtime.joblog), so a report job resolves nothing."""
    from intact.config import resolve_run, resolver, validate_config
    from intact.runtime.joblog import job_params
    from intact.settings import recorded

    cfg = _paper_config("imagenet_r")
    report = report_settings(cfg, resolver(cfg, validate_config(cfg, check_files=False)))
    assert report == report_settings(cfg)
    assert report.official is not None and report.lambdas["imagenet_r"]["lambda_intdrift"] is not None
    assert report.hashes["imagenet_r/coda_p+intact/seed1"] == resolve_run(cfg, "imagenet_r", "coda_p+intact", 1).hash()
    assert job_params({"report": recorded(report)}).report == report


@pytest.mark.slow
def test_fresh_clone_paper_tables_fill_the_paper_columns_and_train_nothing(tmp_path):
    """`snakemake paper_tables` with the repository's config and an empty results/: the paper's numbers in
    every table, a figure per benchmark saying nothing is stored, and no job but the paper rules."""
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")
    out = snakemake(tmp_path, "paper_tables")
    ran = set(re.findall(r"^(?:local)?rule (\w+):", out.stdout + out.stderr, re.M))
    assert ran == {"report_paper_tables", "report_paper_figures", "paper_tables"}, ran
    assert not (tmp_path / "results/runs").exists()
    paper = tmp_path / "results/tables/paper"
    main = (paper / "main.tex").read_text()
    assert "74.23 $\\pm$ 0.16" in main and "85.85 $\\pm$ 0.34" in main
    assert "70.75" in (paper / "ablation.tex").read_text() and "18.04" in (paper / "efficiency.tex").read_text()
    assert pd.read_csv(StringIO((paper / "main.csv").read_text()))["here_mean"].isna().all()
    figures = tmp_path / "results/figures/paper"
    assert {p.name for p in figures.iterdir()} == {f"{f}_digits.{e}" for f in
                                                    ("aa_evolution", "sensitivity", "certificate", "hypercube",
                                                     "feat_gate") for e in ("png", "pdf")}
    assert "Nothing to be done" in snakemake(tmp_path, "paper_tables", "-n").stdout


def test_esn_and_consistent_prompt_rows_are_runs_and_their_notes_say_how_they_are_adapted():
    """ESN and CPrompt run here since issue 21; the main table's notes say how and why there is no + InTAct row."""
    nums = {r["method"]: r for r in paper_numbers()["main"]["rows"]}
    assert nums["ESN"]["ours"] == "esn" and nums["CPrompt"]["ours"] == "consistent_prompt"
    assert {r["method"]: r["ours"] for r in paper_numbers()["efficiency"]["rows"]}["CPrompt"] == "consistent_prompt"
    notes = paper_tables(report_settings(CONFIG), StoredResults())["main"].notes
    esn = [n for n in notes if n.startswith("ESN")]
    cprompt_notes = [n for n in notes if n.startswith("CPrompt")]
    assert len(esn) == 1 and "temperature vote" in esn[0] and "no + InTAct row" in esn[0]
    assert len(cprompt_notes) == 1 and "(domain, class)" in cprompt_notes[0] and "no + InTAct row" in cprompt_notes[0]


def test_the_main_table_sets_the_official_protocols_runs_beside_the_papers_numbers(tmp_path):
    """With studies.main.protocols [intact, official], each row gets its run under the official protocol and
    official − paper (issue 21); a row the protocol declares the same as the default one shows its default run
    and the note says so with the source, a row with neither has no official cell (issue 32)."""
    cfg = load_file(REPO / "config.yaml")
    cfg["protocols"] = {"official": {"per_method": {"compositional_prompt": {"optim": {"epochs": 1}}},
                                     "same_as_default": {"coda_p": "its authors' script, file.sh:3"}}}
    cfg["studies"]["main"] = {"methods": ["coda_p", "compositional_prompt", "ewc"], "protocols": ["intact", "official"]}
    runs = [_run("imagenet_r", "compositional_prompt", s, a) for s, a in ((0, 60.0), (1, 61.0))]
    runs += [_run("imagenet_r", "compositional_prompt@protocol=official", s, a) for s, a in ((0, 63.0), (1, 65.0))]
    runs += [_run("imagenet_r", m, s, 50.0 + s) for s in (0, 1) for m in ("coda_p", "ewc")]
    tables = paper_tables(report_settings(cfg), StoredResults(runs))
    _write(tables, tmp_path)
    main = pd.read_csv(tmp_path / "main.csv").set_index(["run", "benchmark"])
    c = main.loc[("compositional_prompt", "imagenet_r")]
    assert (c["here_mean"], c["official_run"], c["official_mean"]) == (60.5, "compositional_prompt@protocol=official",
                                                                        64.0)
    assert c["official_delta"] == pytest.approx(64.0 - 62.43) and c["delta"] == pytest.approx(60.5 - 62.43)
    coda = main.loc[("coda_p", "imagenet_r")]
    assert coda["official_run"] == "coda_p" and coda["official_mean"] == coda["here_mean"] == 50.5
    ewc = main.loc[("ewc", "imagenet_r")]   # trained under the intact protocol only, and not declared the same
    assert pd.isna(ewc["official_run"]) and pd.isna(ewc["official_mean"]) and ewc["here_mean"] == 50.5
    md = (tmp_path / "main.md").read_text()
    assert "official" in md and "+1.57" in md and "official − paper" in md
    note = next(n for n in tables["main"].notes if n.startswith("here: the intact protocol"))
    assert ("`coda_p`: the official settings of coda_p are the intact protocol's (source: its authors' script, "
            "file.sh:3)") in note
    assert "`ewc`: no official script declared, so no run under the official protocol" in note
    # a config without the official protocol keeps the table's columns as they were
    assert "official_mean" not in paper_tables(report_settings(CONFIG), StoredResults(runs))["main"].data.columns


@pytest.mark.parametrize("name", ["domainnet", "imagenet_r", "imagenet_c", "imagenet_mix"])
def test_a_row_labelled_official_was_trained_under_it_or_is_declared_the_same(name):
    """Issue 32 item 2, on every paper config: each main-table row's official cell comes from a run whose
    protocol is official, or from its default run where the official protocol declares the method the same
    (``same_as_default``, with a source); with the declaration removed, that row has no official run."""
    from intact.layering import merge, read_layers
    from intact.naming import parse_method_name
    from intact.protocols import same_as_default

    cfg = merge(load_file(REPO / "config.yaml"),
                read_layers(REPO / "configs/paper" / f"{name}.yaml"))
    same = same_as_default(cfg, "official")
    assert set(same) == {"l2p", "dualprompt", "coda_p"} and all(same.values())
    data = paper_tables(report_settings(cfg), StoredResults())["main"].data
    labelled = data.dropna(subset=["official_run"])
    assert {"esn@protocol=official", "consistent_prompt@protocol=official", "coda_p"} <= set(labelled["official_run"])
    for run, official in zip(labelled["run"], labelled["official_run"]):
        name_ = parse_method_name(official)
        assert name_.protocol == "official" or (official == run and name_.base in same), (run, official)
    assert set(data[data["official_run"].isna()]["run"].dropna()) == {"ewc", "lwf"}
    cfg["protocols"]["official"]["same_as_default"].pop("l2p")
    rows = paper_tables(report_settings(cfg), StoredResults())["main"].data.set_index("run")
    assert rows.loc["l2p", "official_run"].isna().all()


def _paper_config(name: str) -> dict:
    """config.yaml <- configs/paper/<name>.yaml, as `snakemake --configfile` layers them (no data or weights
    needed)."""
    from intact.layering import read_files

    return read_files([REPO / "config.yaml", REPO / "configs/paper" / f"{name}.yaml"])


def _every_declared_run_stored(cfg: dict, skip: set[str] = frozenset()) -> StoredResults:
    """A stored run for every (benchmark, method, seed) the config declares, but the methods in ``skip``."""
    from intact.plan import Plan, each_run

    declared = Plan(cfg).declared_runs()
    runs = [_run(b, m, s, 50.0 + s + len(m) % 7) for b, m, s in each_run(declared) if m not in skip]
    return StoredResults(runs, declared=declared)


@pytest.mark.parametrize("name", ["imagenet_r", "domainnet", "imagenet_c", "imagenet_mix"])
def test_every_stored_run_of_a_paper_config_fills_its_cells_with_seeds_and_interval(name):
    """Issue 42: every declared run of a paper config stored, then every table row whose runs are declared shows a
    value with its seed count and its 95 % interval - the integration table's "L2P + InTAct" and "DualPrompt +
    InTAct" rows included (their runs carry the InTAct settings in their names) - and nothing is missing. (ImageNet-C
    and -Mix declare no integration study: that table has no column of theirs, and the main study's runs are not
    its to show.)"""
    cfg = _paper_config(name)
    tables = paper_tables(report_settings(cfg), _every_declared_run_stored(cfg))
    for table_name in ("main", "integration", "ablation", "efficiency"):
        table = tables[table_name]
        assert not any(n.startswith("Missing") for n in table.notes), table_name
        for row in table.rows:
            assert not re.fullmatch(r"(.+) \(`\1`\)", row.get("method", "")), row["method"]  # a run named twice
            for key, cell in row.items():
                if key.startswith(f"{name}_") and key.endswith(("_here", "_aa")) and row.get("method", "") != "":
                    assert cell != "—" and "(n=" in cell, (table_name, row.get("method"), key)
    if cfg["studies"].get("integration") is None:
        assert name not in set(tables["integration"].data["benchmark"])
        return
    integ = tables["integration"].data.set_index(["method", "benchmark"])
    for row in ("L2P", "L2P + InTAct", "DualPrompt", "DualPrompt + InTAct"):
        cell = integ.loc[(row, name)]
        assert cell["here_seeds"] == 5 and cell["here_ci_low"] < cell["here_mean"] < cell["here_ci_high"], row
    assert integ.loc[("L2P + InTAct", name), "run"].startswith("l2p+intact@")
    # the paired block compares each InTAct run with its plain run, seed by seed: 5 methods of the study
    paired = tables["integration"].blocks[0].data
    got = set(zip(paired["a"], paired["b"]))
    assert len(got) == 5 and (integ.loc[("L2P + InTAct", name), "run"], "l2p") in got
    assert paired["seeds"].eq(5).all()


def test_a_declared_run_not_stored_is_named_in_the_missing_note():
    cfg = _paper_config("imagenet_r")
    skip = {"dualprompt+intact@lambda_var=1e-1,lambda_feat=1e-4"}
    tables = paper_tables(report_settings(cfg), _every_declared_run_stored(cfg, skip=skip))
    note = next(n for n in tables["integration"].notes if n.startswith("Missing"))
    assert "`dualprompt+intact@lambda_var=1e-1,lambda_feat=1e-4` on imagenet_r (seeds 0, 1, 2, 3, 4)" in note
    row = tables["integration"].data.set_index(["method", "benchmark"]).loc[("DualPrompt + InTAct", "imagenet_r")]
    assert pd.isna(row["here_mean"])
    assert not any(n.startswith("Missing") for n in tables["main"].notes)
    # the note names the missing runs only: a table's other dashes (the ablation's full row has no Δ, a paper number
    # not reported) are still said (before 2026-12-01 its "—" kept the general note away)
    from intact.report.render import DASH_NOTE, explained

    ablation = paper_tables(report_settings(cfg), _every_declared_run_stored(cfg, skip={"coda_p+intact-no_var"}))
    notes = explained(ablation["ablation"]).notes
    assert notes[0].startswith("Missing: 1 declared run(s)") and DASH_NOTE in notes


def test_a_stored_run_that_no_cell_shows_is_an_error_naming_the_row_and_the_name_it_looked_for():
    """The defect issue 42 found: a table that spells a run another way than the study that declared it."""
    from intact.report.completeness import IncompleteReport, Ledger
    from intact.report.paper_tables import comparison_table

    cfg = _paper_config("imagenet_r")
    stored = _every_declared_run_stored(cfg)
    ledger = Ledger("integration", stored)
    comparison_table("integration", "t", paper_numbers()["integration"], ["l2p", "l2p+intact"], ledger)
    with pytest.raises(IncompleteReport, match=r"l2p\+intact@lambda_var=1e-2,lambda_feat=1e-1` on imagenet_r.*"
                                               r"row 'L2P \+ InTAct' looked for `l2p\+intact` on imagenet_r"):
        ledger.check({"imagenet_r": ["l2p", "l2p+intact@lambda_var=1e-2,lambda_feat=1e-1"]})


def test_a_non_finite_value_never_reaches_a_table():
    from intact.report.completeness import IncompleteReport

    cfg = _paper_config("imagenet_r")
    stored = _every_declared_run_stored(cfg)
    stored.runs[0].metrics["aa"] = float("nan")
    with pytest.raises(IncompleteReport, match="non-finite aa"):
        paper_tables(report_settings(cfg), stored)
