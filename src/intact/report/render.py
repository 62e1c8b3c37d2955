"""One table, three formats: CSV (the numbers), Markdown (to read), LaTeX (booktabs, to paste into a paper): the
one renderer and writer of every table (the default run's, the studies', the tune study's, the paper's and the
experiments').

A :class:`Table` holds display cells (already formatted, ``—`` where not run), which cells are bold,
column groups (a paper/measured/Δ triple under one benchmark), notes stated under the table, and the
machine-readable numbers as a DataFrame for the CSV. Sub-tables (``blocks``: the paired per-seed
differences) are rendered after the main one in Markdown and LaTeX and get their own CSV.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from intact.io import write_text


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    group: str = ""
    align: str = "c"  #: "l", "c", "r"; "": none (Markdown's plain ``---``; LaTeX centres it)


@dataclass
class Table:
    """Display cells of one table; ``rules`` = row indices preceded by a horizontal rule."""

    name: str
    title: str
    columns: list[Column]
    rows: list[dict[str, str]] = field(default_factory=list)
    bold: set[tuple[int, str]] = field(default_factory=set)
    rules: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    data: pd.DataFrame = field(default_factory=pd.DataFrame)
    blocks: list[Table] = field(default_factory=list)
    #: the CSV's number format (None: full precision, the numbers round-trip)
    float_format: str | None = None
    #: the Markdown heading's level (None: 3, a block's one more than its table's)
    level: int | None = None

    def __post_init__(self) -> None:
        keys = [c.key for c in self.columns]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:   # two columns would show one cell: the second's title over the first's value
            raise ValueError(f"table {self.name!r}: column key(s) {', '.join(twice)} given twice")

    def cell(self, i: int, key: str) -> str:
        return self.rows[i].get(key, "—")


#: what a ``—`` cell means, stated under a table that shows one and whose notes say nothing of it themselves
DASH_NOTE = "— = no value: not run here, not reported by the paper, or an interval of fewer than two seeds."


def explained(table: Table) -> Table:
    """``table`` and its blocks, each with :data:`DASH_NOTE` added where it shows a ``—`` cell and none of its notes
    mentions ``—``: a table never shows an empty cell silently."""
    shows = any(table.cell(i, c.key) == "—" for i in range(len(table.rows)) for c in table.columns)
    notes = [*table.notes, DASH_NOTE] if shows and not any("—" in n for n in table.notes) else table.notes
    return dataclasses.replace(table, notes=notes, blocks=[explained(b) for b in table.blocks])


def bold_best(table: Table, keys: list[str], values: list[dict[str, float | None]], higher: bool = True,
              seeds: list[dict[str, int | None]] | None = None) -> list[str]:
    """Mark, per column ``key``, the row(s) with the best numeric value (``values[i][key]``). With ``seeds`` (the
    seed count behind ``values[i][key]``; None: not ours, e.g. the paper's): no mark in a column whose values stand
    on different seed counts (a run still missing seeds is not ranked against whole ones). Returns those columns."""
    unequal = []
    for key in keys:
        nums = [(i, v[key]) for i, v in enumerate(values) if v.get(key) is not None]
        if len(nums) < 2:
            continue
        if seeds is not None and len({seeds[i].get(key) for i, _ in nums} - {None}) > 1:
            unequal.append(key)
            continue
        best = max(x for _, x in nums) if higher else min(x for _, x in nums)
        table.bold |= {(i, key) for i, x in nums if round(x, 2) == round(best, 2)}
    return unequal


def bold_note(table: Table, unequal: list[str]) -> str:
    """The notes' word on :func:`bold_best`: the best per column, and the columns left unmarked."""
    titles = {c.key: f"{c.group} {c.title}".strip() for c in table.columns}
    return "Bold: best per column" + (f"; none in {', '.join(titles[k] for k in unequal)}, whose rows stand on "
                                      "different seed counts." if unequal else ".")


# --------------------------------------------------------------------------------------------------
# Markdown


def _md_header(table: Table) -> list[str]:
    return [f"{c.group} {c.title}".strip() if c.group else c.title for c in table.columns]


def _md_rule(c: Column) -> str:
    return {"l": ":---", "": "---"}.get(c.align, "---:")


def to_markdown(table: Table, level: int = 3, banner: str | None = None) -> str:
    """The heading, the grid (where the table has columns), a blank line and the notes (where it has any), then
    each block after a blank line."""
    level = table.level or level
    lines = [f"{'#' * level} {'REHEARSAL - ' if banner else ''}{table.title}", ""]
    if table.columns:
        lines += ["| " + " | ".join(_md_header(table)) + " |", "|" + "|".join(map(_md_rule, table.columns)) + "|"]
    for i in range(len(table.rows)):
        cells = [table.cell(i, c.key) for c in table.columns]
        cells = [f"**{x}**" if (i, c.key) in table.bold and x != "—" else x for x, c in zip(cells, table.columns)]
        lines.append("| " + " | ".join(cells) + " |")
    if table.notes:
        lines.append("")
        lines += [n + "  " for n in table.notes[:-1]] + table.notes[-1:]
    text = "\n".join(lines) + "\n"
    for block in table.blocks:
        text = text.rstrip("\n") + "\n\n" + to_markdown(block, level + 1, banner)
    return text


# --------------------------------------------------------------------------------------------------
# LaTeX

_TEX_SYMBOLS = {
    "±": r"$\pm$", "—": "---", "−": "$-$", "Δ": r"$\Delta$", "λ": r"$\lambda$", "Σ": r"$\Sigma$",
    "≤": r"$\le$", "≥": r"$\ge$", "✓": r"\checkmark", "✗": r"$\times$", "·": r"$\cdot$", "–": "--",
    "×": r"$\times$", "<": "$<$", ">": "$>$",
}
_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_TEX_PATTERN = re.compile("|".join(map(re.escape, [*_TEX_SPECIAL, *_TEX_SYMBOLS])))


def tex(text: str) -> str:
    """Plain text (with the tables' few non-ASCII symbols) as LaTeX that pdflatex compiles."""
    text = text.replace("`", "")
    return _TEX_PATTERN.sub(lambda m: _TEX_SPECIAL.get(m[0]) or _TEX_SYMBOLS[m[0]], text)


def _tex_header(table: Table) -> list[str]:
    lines = []
    if any(c.group for c in table.columns):
        spans: list[tuple[str, int, int]] = []  # (group, first column 1-based, width)
        for j, c in enumerate(table.columns, start=1):
            if spans and spans[-1][0] == c.group and c.group:
                g, first, width = spans[-1]
                spans[-1] = (g, first, width + 1)
            else:
                spans.append((c.group, j, 1))
        cells = [rf"\multicolumn{{{w}}}{{c}}{{{tex(g)}}}" if g and w > 1 else tex(g) for g, _, w in spans]
        lines.append(" & ".join(cells) + r" \\")
        lines.append(" ".join(rf"\cmidrule(lr){{{f}-{f + w - 1}}}" for g, f, w in spans if g))
    lines.append(" & ".join(tex(c.title) for c in table.columns) + r" \\")
    return lines


def _tabular(table: Table) -> list[str]:
    spec = "".join(c.align or "c" for c in table.columns)
    lines = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", *_tex_header(table), r"\midrule"]
    for i in range(len(table.rows)):
        if i in table.rules and i > 0:
            lines.append(r"\midrule")
        cells = []
        for c in table.columns:
            x = tex(table.cell(i, c.key))
            cells.append(rf"\textbf{{{x}}}" if (i, c.key) in table.bold and x != "---" else x)
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return lines


#: tables with more columns than this are scaled down to the text width
WIDE = 7


def to_latex(table: Table, banner: str | None = None) -> str:
    """A ``table`` float per table (and per block): booktabs rules, ``mean $\\pm$ std``, best in bold.
    Needs ``booktabs``, ``graphicx`` (wide tables are scaled to the text width) and ``amssymb``."""
    out = ["% Generated by intact.report.render from stored results; do not edit by hand.",
           "% Needs \\usepackage{booktabs,graphicx,amssymb}."]
    for t in [table, *table.blocks]:
        caption = tex(f"{banner}. {t.title}" if banner else t.title)
        out += [r"\begin{table}[t]", r"\centering", rf"\caption{{{caption}}}",
                rf"\label{{tab:intact-{t.name.replace('_', '-')}}}"]
        # only wide tables are scaled to the text width (scaling would blow small ones up)
        wide = len(t.columns) > WIDE
        out += [r"\resizebox{\linewidth}{!}{%", *_tabular(t), "}"] if wide else _tabular(t)
        if t.notes:
            out += [r"\par\smallskip", r"\begin{minipage}{\linewidth}\footnotesize\raggedright",
                    *[tex(n) + r"\par" for n in t.notes], r"\end{minipage}"]
        out += [r"\end{table}", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------


def _csv(table: Table, banner: str | None) -> str:
    """The numbers (in the table's ``float_format``); a rehearsal's rows marked in a first column."""
    data = table.data
    if banner:
        data = data.copy()
        data.insert(0, "rehearsal", True)
    return data.to_csv(index=False, lineterminator="\n", float_format=table.float_format)


def write_table(table: Table, csv: str | Path | None = None, md: str | Path | None = None,
                latex: str | Path | None = None, banner: str | None = None) -> None:
    """CSV (+ one ``<block name>.csv`` per block beside it), Markdown and LaTeX, each where a path is given,
    atomically: the one table writer. ``banner``: a line the table carries on itself in every format (a
    rehearsal's, :func:`intact.rehearsal.banner`): before the Markdown and its title, in the LaTeX caption, and
    as a ``rehearsal`` column of the CSV. A table that shows ``—`` says what it means (:func:`explained`)."""
    table = explained(table)
    if csv is not None:
        write_text(csv, _csv(table, banner))
        for block in table.blocks:
            write_text(Path(csv).with_name(f"{block.name}.csv"), _csv(block, banner))
    if md is not None:
        write_text(md, (f"**{banner}**\n\n" if banner else "") + to_markdown(table, banner=banner))
    if latex is not None:
        write_text(latex, to_latex(table, banner=banner))
