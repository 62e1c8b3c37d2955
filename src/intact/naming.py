"""Method names: one string says which method, whether InTAct is on, and which variant it is.

Grammar (docs/design.md section 4)::

    <base>[+intact][-no_<term>]...[@<key>=<value>[,<key>=<value>]...]

    coda_p                                  CODA-Prompt
    coda_p+intact                           CODA-Prompt + InTAct (the paper's equations)
    coda_p+intact-no_var                    ablation: L_Var switched off
    coda_p+intact@lambda_intdrift=1e-4      sweep point: one lambda changed
    coda_p@optim.epochs=10                  any config key, dotted as section.key
    esn@protocol=official                   the run under another declared protocol (docs/protocols.md)

A key without a dot belongs to the ``intact`` section, except ``protocol``: it names the protocol the run
is trained under (``protocols.<name>`` of the config); a name without it runs under the default protocol,
``intact``, so every run named before protocols existed keeps its name. The name is also the run's folder, so every
variant gets its own results without hand-written paths. This module imports no torch.
"""

from __future__ import annotations

import functools
import re
import reprlib
from dataclasses import dataclass

import yaml

#: InTAct loss terms, named as in the paper.
TERMS = ("intdrift", "feat", "var", "align")

#: the parts of a run name; :data:`NAME_PATTERN` and the parser are built from them, so that what Snakemake's
#: wildcard accepts and what validation accepts are one pattern
_BASE, _INTACT, _ABLATIONS, _OVERRIDES = r"[a-z][a-z0-9_]*", r"\+intact", r"(?:-no_[a-z]+)*", r"[A-Za-z0-9_.=,+\-]+"

#: Characters a method name may contain (also the Snakemake wildcard constraint), matched over the whole name.
NAME_PATTERN = rf"{_BASE}(?:{_INTACT})?{_ABLATIONS}(?:@{_OVERRIDES})?"

_NAME = re.compile(rf"(?P<base>{_BASE})(?P<intact>{_INTACT})?(?P<ablations>{_ABLATIONS})"
                   rf"(?:@(?P<overrides>{_OVERRIDES}))?")

#: the longest run name: it is a folder's name (most file systems allow 255 bytes)
NAME_MAX_LENGTH = 200

#: the override key that names a run's protocol, and the protocol of a name without it
PROTOCOL_KEY = "protocol"
DEFAULT_PROTOCOL = "intact"


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

    @property
    def protocol(self) -> str:
        """The protocol the run is trained under (``@protocol=<name>``; :data:`DEFAULT_PROTOCOL` without it)."""
        return str(dict(self.overrides).get(PROTOCOL_KEY, DEFAULT_PROTOCOL))

    def section_overrides(self) -> dict[str, dict[str, object]]:
        """The overrides as {section: {key: value}}, ablations included (a switched-off term has lambda 0);
        the protocol is not a setting (see :attr:`protocol`)."""
        out: dict[str, dict[str, object]] = {}
        for term in self.disabled:
            out.setdefault("intact", {})[f"lambda_{term}"] = 0.0
        for key, value in self.overrides:
            if key == PROTOCOL_KEY:
                continue
            section, _, field = key.rpartition(".")
            out.setdefault(section or "intact", {})[field] = value
        return out


def parse_method_name(name: str) -> MethodName:
    """Parse ``name``, matched whole against :data:`NAME_PATTERN`; raise :class:`MethodNameError` naming the
    offending part (whitespace and control characters by position: a run name is a folder's name)."""
    return _parse_name(name) if isinstance(name, str) else _parse_name_uncached(name)


@functools.lru_cache(maxsize=4096)
def _parse_name(name: str) -> MethodName:
    """:func:`parse_method_name` of a string, kept: a config's validation parses each run's name several times
    (~450 parses of ~200 names for the default config); a :class:`MethodName` is immutable."""
    return _parse_name_uncached(name)


def _parse_name_uncached(name: object) -> MethodName:
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if m is not None and len(name) > NAME_MAX_LENGTH:
        raise MethodNameError(f"method name {excerpt(name)} has {len(name)} characters; at most {NAME_MAX_LENGTH} "
                              "(it names the run's folder)")
    if m is None:
        raise MethodNameError(f"method name {excerpt(name)} does not follow "
                              "<base>[+intact][-no_<term>]...[@key=value,...]"
                              + _odd_character(name))
    intact = m["intact"] is not None
    disabled = tuple(a for a in m["ablations"].split("-no_") if a)
    for term in disabled:
        if term not in TERMS:
            raise MethodNameError(f"method name {name!r}: unknown InTAct term 'no_{term}' (expected one of "
                                  f"{', '.join('no_' + t for t in TERMS)})")
        if not intact:
            raise MethodNameError(f"method name {name!r}: '-no_{term}' ablates an InTAct term, so the name needs "
                                  "'+intact'")
    overrides: list[tuple[str, object]] = []
    if m["overrides"]:
        for item in m["overrides"].split(","):
            key, sep, raw = item.partition("=")
            if not sep or not key or not raw:
                raise MethodNameError(f"method name {name!r}: override {item!r} is not key=value")
            overrides.append((key, raw if key == PROTOCOL_KEY else _parse_scalar(raw)))
    if dict(overrides).get(PROTOCOL_KEY) == DEFAULT_PROTOCOL:
        raise MethodNameError(f"method name {name!r}: '{PROTOCOL_KEY}={DEFAULT_PROTOCOL}' is the default protocol; "
                              "leave it out of the name (one name per run)")
    return MethodName(full=name, base=m["base"], intact=intact, disabled=disabled, overrides=tuple(overrides))


def _odd_character(name: object) -> str:
    """``": it has a space at position 6"``-like, for the first whitespace or control character of ``name``."""
    for i, ch in enumerate(name if isinstance(name, str) else ""):
        if ch.isspace() or not ch.isprintable():
            return f": it has {ascii(ch)} at position {i} (no whitespace or control characters)"
    return ""


def excerpt(value: object) -> str:
    """``repr(value)`` cut short for a one-line message (at most a few items of a list or mapping, the ends of a
    long string): a message quotes an excerpt of a value, never the whole of a huge list. Cheap on any size."""
    return _EXCERPT.repr(value)


_EXCERPT = reprlib.Repr()
_EXCERPT.maxlist = _EXCERPT.maxtuple = _EXCERPT.maxset = _EXCERPT.maxdict = 6
_EXCERPT.maxstring = _EXCERPT.maxother = 80
_EXCERPT.maxlevel = 3


def _parse_scalar(raw: str) -> object:
    # YAML 1.1 reads "1e-4" as a string; accept it as the float a user means.
    try:
        return float(raw) if re.fullmatch(r"[+-]?\d+(\.\d*)?[eE][+-]?\d+", raw) else yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def with_protocol(method: str, protocol: str) -> str:
    """``method`` under ``protocol``: unchanged for the default protocol, else ``...@protocol=<name>``
    (``,protocol=<name>`` after other overrides)."""
    if protocol == DEFAULT_PROTOCOL:
        return method
    return f"{method}{',' if '@' in method else '@'}{PROTOCOL_KEY}={protocol}"
