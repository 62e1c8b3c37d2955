"""Method names: one string says which method, whether InTAct is on, and which variant it is.

Grammar (docs/design.md section 4)::

    <base>[+intact][-no_<term>]...[@<key>=<value>[,<key>=<value>]...]

    coda_p                                  CODA-Prompt
    coda_p+intact                           CODA-Prompt + InTAct (the paper's equations)
    coda_p+intact-no_var                    ablation: L_Var switched off
    coda_p+intact@lambda_intdrift=1e-4      sweep point: one lambda changed
    coda_p@optim.epochs=10                  any config key, dotted as section.key

A key without a dot belongs to the ``intact`` section. The name is also the run's folder, so every
variant gets its own results without hand-written paths. This module imports no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

#: InTAct loss terms, named as in the paper.
TERMS = ("intdrift", "feat", "var", "align")

_NAME = re.compile(
    r"^(?P<base>[a-z][a-z0-9_]*)"
    r"(?P<intact>\+intact)?"
    r"(?P<ablations>(?:-no_[a-z]+)*)"
    r"(?:@(?P<overrides>.+))?$"
)

#: Characters a method name may contain (also the Snakemake wildcard constraint).
NAME_PATTERN = r"[a-z][a-z0-9_]*(?:\+intact)?(?:-no_[a-z]+)*(?:@[A-Za-z0-9_.=,+\-]+)?"


class MethodNameError(ValueError):
    """A method name that does not follow the grammar."""


@dataclass(frozen=True)
class MethodName:
    """A parsed method name."""

    full: str
    base: str
    intact: bool
    disabled: tuple[str, ...] = ()
    overrides: tuple[tuple[str, object], ...] = ()

    def section_overrides(self) -> dict[str, dict[str, object]]:
        """The overrides as {section: {key: value}}, ablations included (a switched-off term has lambda 0)."""
        out: dict[str, dict[str, object]] = {}
        for term in self.disabled:
            out.setdefault("intact", {})[f"lambda_{term}"] = 0.0
        for key, value in self.overrides:
            section, _, field = key.rpartition(".")
            out.setdefault(section or "intact", {})[field] = value
        return out


def parse_method_name(name: str) -> MethodName:
    """Parse ``name``; raise :class:`MethodNameError` naming the offending part."""
    m = _NAME.match(name)
    if m is None:
        raise MethodNameError(
            f"method name {name!r} does not follow <base>[+intact][-no_<term>]...[@key=value,...]"
        )
    intact = m["intact"] is not None
    disabled = tuple(a for a in m["ablations"].split("-no_") if a)
    for term in disabled:
        if term not in TERMS:
            raise MethodNameError(f"method name {name!r}: unknown InTAct term 'no_{term}' (expected one of {', '.join('no_' + t for t in TERMS)})")
        if not intact:
            raise MethodNameError(f"method name {name!r}: '-no_{term}' ablates an InTAct term, so the name needs '+intact'")
    overrides: list[tuple[str, object]] = []
    if m["overrides"]:
        for item in m["overrides"].split(","):
            key, sep, raw = item.partition("=")
            if not sep or not key or not raw:
                raise MethodNameError(f"method name {name!r}: override {item!r} is not key=value")
            overrides.append((key, _parse_scalar(raw)))
    return MethodName(full=name, base=m["base"], intact=intact, disabled=disabled, overrides=tuple(overrides))


def _parse_scalar(raw: str) -> object:
    # YAML 1.1 reads "1e-4" as a string; accept it as the float a user means.
    try:
        return float(raw) if re.fullmatch(r"[+-]?\d+(\.\d*)?[eE][+-]?\d+", raw) else yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
