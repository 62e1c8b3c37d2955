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
from collections.abc import Sequence
from dataclasses import dataclass

from intact.layering import LayerError, load_text

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
    # each setting the name sets, and by what: a second value would silently win over the first (one name per run)
    setters = {f"intact.lambda_{term}": f"-no_{term}" for term in disabled}
    if m["overrides"]:
        for item in m["overrides"].split(","):
            key, sep, raw = item.partition("=")
            if not sep or not key or not raw:
                raise MethodNameError(f"method name {name!r}: override {item!r} is not key=value")
            setting = key if key == PROTOCOL_KEY or "." in key else f"intact.{key}"
            if setting in setters:
                raise MethodNameError(f"method name {name!r}: {item!r} sets {setting!r}, which {setters[setting]!r} "
                                      "sets already (one value per setting)")
            setters[setting] = item
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
        return float(raw) if re.fullmatch(r"[+-]?\d+(\.\d*)?[eE][+-]?\d+", raw) else load_text(raw, "a run name")
    except LayerError:
        return raw


# ---- building names: every run name the studies, the tune, the reports and the tables use is spelled here


def format_value(value: float) -> str:
    """A compact, name-safe spelling of a number in a run name: 1e-4, 0.5, 1, 2.5e-4."""
    short = f"{value:.0e}"
    text = short if value != 0 and abs(value) < 0.01 and float(short) == value else f"{value:g}"
    return text.replace("e-0", "e-").replace("e+0", "e+")


def misspelled(value: float) -> str | None:
    """How a run name spells ``value`` where that is another number (a name keeps 6 significant digits: its run
    would train with the number its name says), else None."""
    text = format_value(float(value))
    return text if float(text) != value else None


def with_overrides(name: str, items: Sequence[str]) -> str:
    """``name`` with ``key=value`` items appended to its overrides (after ``@``, or ``,`` after others)."""
    if not items:
        return name
    return name + ("," if "@" in name else "@") + ",".join(items)


def with_protocol(method: str, protocol: str) -> str:
    """``method`` under ``protocol``: unchanged for the default protocol, else ``...@protocol=<name>``
    (``,protocol=<name>`` after other overrides)."""
    if protocol == DEFAULT_PROTOCOL:
        return method
    return with_overrides(method, [f"{PROTOCOL_KEY}={protocol}"])


def ablation_name(method: str, term: str) -> str:
    """``coda_p+intact`` without ``term``: ``coda_p+intact-no_<term>`` (ablations precede overrides)."""
    head, sep, overrides = method.partition("@")
    return f"{head}-no_{term}" + (f"@{overrides}" if sep else "")


def sweep_name(method: str, key: str, value: float) -> str:
    """``method`` with one setting changed: ``coda_p+intact@lambda_feat=0.1``."""
    return with_overrides(method, [f"{key}={format_value(value)}"])


def with_intact(name: str) -> str:
    """``name`` with InTAct: ``l2p`` -> ``l2p+intact``, ``l2p@lambda_var=1e-2`` -> ``l2p+intact@lambda_var=1e-2``
    (every override kept, written as given)."""
    if parse_method_name(name).intact:
        raise MethodNameError(f"method name {name!r} already has '+intact'")
    head, sep, overrides = name.partition("@")
    return f"{head}+intact" + (f"@{overrides}" if sep else "")


def _is_intact_setting(key: str) -> bool:
    """An override key of the ``intact`` section (no dot, not the protocol; or ``intact.<key>``): it means nothing
    without InTAct."""
    return ("." not in key and key != PROTOCOL_KEY) or key.startswith("intact.")


def baseline(name: str) -> str | None:
    """The run an InTAct run is compared with: the same method without InTAct, under the same settings that do
    not belong to InTAct (``optim.``, ``methods.``, ``run.`` keys, the protocol), its InTAct settings and ablations
    dropped: ``coda_p+intact@lambda_feat=3,optim.epochs=2`` -> ``coda_p@optim.epochs=2``. None for a run without
    InTAct. The one pairing rule of every table, study and search (:func:`intact_pair`, :func:`pairs`)."""
    parsed = parse_method_name(name)
    if not parsed.intact:
        return None
    _, _, overrides = name.partition("@")
    kept = [item for item in overrides.split(",") if item and not _is_intact_setting(item.partition("=")[0])]
    return with_overrides(parsed.base, kept)


def intact_pair(entry: str) -> tuple[str, str]:
    """(baseline, InTAct run) of a method that a study or search declares with and without InTAct: ``entry`` is
    the plain method with the InTAct run's settings, ``l2p@lambda_var=1e-2`` -> (``l2p``,
    ``l2p+intact@lambda_var=1e-2``); settings outside ``intact`` go to both runs."""
    run = with_intact(entry)
    return baseline(run), run


def pairs(methods: Sequence[str]) -> list[tuple[str, str]]:
    """(A, B) comparisons among ``methods``, ordered by B then A: each InTAct run with its :func:`baseline`, and a
    run with InTAct settings of its own (``coda_p+intact@preset=reference``) also with InTAct at its defaults
    under the same other settings (``coda_p+intact``), where those runs are among ``methods``. Ablations
    (``-no_<term>``) are compared in the ablation table instead."""
    present, out = set(methods), set()
    for m in methods:
        plain = baseline(m)
        if plain is None or parse_method_name(m).disabled:
            continue
        for partner in (plain, with_intact(plain)):
            if partner in present and partner != m:
                out.add((m, partner))
    return sorted(out, key=lambda p: (methods.index(p[1]), methods.index(p[0])))
