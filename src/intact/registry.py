"""Lazy registries: a name maps to a "module:attribute" string, imported on first use.

Lazy on purpose: the Snakefile validates names at start-up (and on every cluster job) without
paying for a torch/timm import.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping


def resolve(registry: Mapping[str, Any], name: str, what: str) -> Any:
    """Return ``registry[name]`` or raise a KeyError that lists the valid names."""
    try:
        return registry[name]
    except KeyError:
        raise KeyError(f"unknown {what} {name!r}; registered: {', '.join(sorted(registry))}") from None


def load_target(target: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
