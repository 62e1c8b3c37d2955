"""Frozen features: a method's per-image functions of frozen parts, which the job may serve from a cache.

A method marks each such function with :func:`frozen_feature` (the query, InTAct's teacher, KA-Prompt's old trunk):
its value on an image is fixed for the whole task, so the job (:mod:`intact.cache`) computes it once per image and
augmentation variant and, while a batch trains, :func:`serving` hands the function the batch's rows, which it then
returns instead of computing. The method only calls its functions; it never sees the cache. A marked function takes
the batch's images and, but for the query, the batch's queries: ``f(x)`` / ``f(x, q)``.

The job asks :func:`frozen_features` for the functions a task uses and :func:`reads_benchmark_queries` whether the
benchmark's query cache (the unprompted [CLS], written once by the ``query_cache`` rule) is this method's query.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Iterator

import torch
from torch import nn

#: the query's name: the feature other features are computed from (``f(x, q)``) and the benchmark may cache
QUERY = "query"


@dataclass(frozen=True)
class FrozenFeature:
    """A marked function's declaration: its cache name, whether the method uses it now (``when(method)``), whether
    it is the benchmark's cached query (``benchmark_cache(method)``)."""

    name: str
    when: Callable[[Any], bool]
    benchmark_cache: Callable[[Any], bool]


def frozen_feature(name: str | None = None, *, when: Callable[[Any], bool] | None = None,
                   benchmark_cache: bool | Callable[[Any], bool] = False) -> Callable[[Callable], Callable]:
    """Mark a method's function of a batch's images as a frozen feature named ``name`` (default: the function's
    name). ``when(method)``: whether the method uses it this task (default: always); ``benchmark_cache``: True (or
    ``method -> bool``) where it is the benchmark's query cache, the frozen backbone's unprompted [CLS]."""

    def mark(fn: Callable) -> Callable:
        key = name or fn.__name__

        @functools.wraps(fn)
        def serve(self: nn.Module, x: torch.Tensor, *args: Any) -> torch.Tensor:
            served = self.__dict__.get("_served")
            if served is not None and key in served:
                return served[key]
            return fn(self, x, *args)

        cached = benchmark_cache if callable(benchmark_cache) else (lambda method: benchmark_cache)
        serve.frozen_feature = FrozenFeature(key, when or (lambda method: True), cached)
        return serve

    return mark


def _declared(method: nn.Module) -> dict[str, tuple[FrozenFeature, Callable]]:
    """Every frozen feature of ``method``'s class (the most derived definition of each attribute), by name."""
    out = {}
    for attr in dir(type(method)):
        spec = getattr(getattr(type(method), attr, None), "frozen_feature", None)
        if isinstance(spec, FrozenFeature):
            out[spec.name] = (spec, getattr(method, attr))
    return out


def frozen_features(method: nn.Module) -> dict[str, Callable[..., torch.Tensor]]:
    """The frozen features ``method`` uses this task, by name (the query first): what the job may cache."""
    used = {name: fn for name, (spec, fn) in _declared(method).items() if spec.when(method)}
    return dict(sorted(used.items(), key=lambda item: item[0] != QUERY))


def reads_benchmark_queries(method: nn.Module) -> bool:
    """Whether ``method``'s query is the benchmark's cached one (its query cache may serve it)."""
    found = _declared(method).get(QUERY)
    return found is not None and found[0].when(method) and found[0].benchmark_cache(method)


@contextmanager
def serving(method: nn.Module, rows: dict[str, torch.Tensor]) -> Iterator[None]:
    """Within the block, ``method``'s frozen features named in ``rows`` return those rows (the current batch's)."""
    method.__dict__["_served"] = rows
    try:
        yield
    finally:
        method.__dict__.pop("_served", None)


@contextmanager
def serving_pass(method: nn.Module, data: Any, queries: torch.Tensor | None) -> Iterator[None]:
    """Within the block, a pass over ``data`` in order (``ContinualMethod.batches``) serves each batch its rows of
    ``queries`` (every image's query, in order; None: nothing cached); a pass over other data computes its own."""
    if queries is None:
        yield
        return
    if len(queries) != len(data):
        raise ValueError(f"serving_pass: {len(queries)} cached queries for {len(data)} images")
    method.__dict__["_pass_queries"] = (data, queries)
    try:
        yield
    finally:
        method.__dict__.pop("_pass_queries", None)


def pass_queries(method: nn.Module, data: Any) -> torch.Tensor | None:
    """The queries :func:`serving_pass` set for a pass over ``data`` (the same object), or None."""
    served = method.__dict__.get("_pass_queries")
    return served[1] if served is not None and served[0] is data else None
