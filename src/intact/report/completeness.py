"""Every cell of a paper table and every series of a paper figure whose runs are stored shows them.

A :class:`Ledger` is what one table or figure read of the stored runs: each cell asks it for a run's values
(:meth:`Ledger.values`), so it knows which runs were shown, which declared runs are not stored yet (named in the
table's one "missing" note, :meth:`Ledger.missing_note`) and which runs a cell looked for that the config does
not declare. :meth:`Ledger.check` then refuses a table that leaves a stored run of its own out
(:class:`IncompleteReport`, naming the run and the rows that looked for other names), so a name built one way
in a study and another way in a table can never leave a cell silently empty again. No torch here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Iterable, Mapping

from intact.metrics import Stat
from intact.results import StoredResults

#: how many names a message or note spells out before it says "and N more"
SHOW = 12


class IncompleteReport(ValueError):
    """A table or figure that would leave a stored run out, or show a non-finite value."""


def _names(items: list[str]) -> str:
    return ", ".join(items[:SHOW]) + (f" and {len(items) - SHOW} more" if len(items) > SHOW else "")


@dataclass
class Ledger:
    """The stored runs one table or figure (``name``) showed, and the declared ones it could not show yet."""

    name: str
    stored: StoredResults
    #: (benchmark, run) of every cell that shows stored values
    shown: set[tuple[str, str]] = field(default_factory=set)
    #: (benchmark, run) -> the declared seeds not stored yet
    missing: dict[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)
    #: (row, benchmark) -> a run name a cell looked for that the config does not declare
    undeclared: dict[tuple[str, str], str] = field(default_factory=dict)

    def values(self, row: str, benchmark: str, run: str | None, key: str = "aa") -> dict[int, float]:
        """seed -> ``metrics.json[key]`` of ``run``'s stored runs on ``benchmark``, for the cell of ``row``; an
        empty dict where nothing is stored (a declared run: named in the missing note). A non-finite value is
        an error (:class:`IncompleteReport`): no NaN reaches a table."""
        if run is None:
            return {}
        declared = self.stored.declared.get(benchmark, {}).get(run)
        values = self.stored.values(benchmark, run, key)
        if declared is None and not values:
            self.undeclared[(row, benchmark)] = run
            return {}
        absent = tuple(s for s in (declared or ()) if s not in values)
        if absent:
            self.missing[(benchmark, run)] = absent
        bad = [s for s, v in values.items() if not math.isfinite(v)]
        if bad:
            raise IncompleteReport(f"{self.name}: row {row!r}: run {run!r} on {benchmark} has a non-finite {key} on "
                                   f"seed(s) {', '.join(map(str, bad))}")
        if values:
            self.shown.add((benchmark, run))
        return values

    def stat(self, row: str, benchmark: str, run: str | None, key: str = "aa") -> Stat | None:
        """Mean ± std (with the seed count) of :meth:`values`; None where nothing is stored."""
        return Stat.of(list(self.values(row, benchmark, run, key).values()))

    def missing_note(self) -> str | None:
        """The one note that names every declared run a cell or series waits for (None: nothing missing)."""
        if not self.missing:
            return None
        items = [f"`{run}` on {b} (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})"
                 for (b, run), seeds in sorted(self.missing.items())]
        return (f"Missing: {len(items)} declared run(s) not stored yet, shown as a dash or without those seeds: "
                f"{_names(items)}.")

    def check(self, scope: Mapping[str, Iterable[str]]) -> None:
        """Refuse (:class:`IncompleteReport`) when a run of ``scope`` (benchmark -> the runs this table or figure
        exists to show) is stored but no cell showed it; the message names those runs, and every row that looked
        for a name the config does not declare."""
        left_out = sorted(f"`{run}` on {b}" for b, runs in scope.items() for run in runs
                          if self.stored.values(b, run) and (b, run) not in self.shown)
        if not left_out:
            return
        looked = [f"row {row!r} looked for `{run}` on {b}" for (row, b), run in sorted(self.undeclared.items())]
        raise IncompleteReport(f"{self.name}: stored run(s) that no cell shows: {_names(left_out)}"
                               + (f"; {_names(looked)} (not declared by this config)" if looked else ""))
