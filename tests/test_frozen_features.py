"""Frozen features (intact.methods.shared.frozen): what a method marks is found, ordered, switched by ``when``, and
returns the rows the job serves instead of computing; the method never names a cache."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from intact.methods.shared.frozen import (
    QUERY, frozen_feature, frozen_features, pass_queries, reads_benchmark_queries, serving, serving_pass,
)


class Marked(nn.Module):
    """Two marked features and one unmarked function; ``use_extra`` switches the second on."""

    def __init__(self, use_extra: bool, query_token: str = "cls"):
        super().__init__()
        self.use_extra, self.cfg, self.calls = use_extra, SimpleNamespace(query=query_token), []

    @frozen_feature(when=lambda self: self.use_extra)
    def extra(self, x: torch.Tensor, q: torch.Tensor | None = None) -> torch.Tensor:
        self.calls.append("extra")
        return x * 3

    @frozen_feature(QUERY, benchmark_cache=lambda self: self.cfg.query == "cls")
    def query(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append("query")
        return x + 1

    def plain(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Unmarked(Marked):
    def query(self, x: torch.Tensor) -> torch.Tensor:   # overridden without the mark: no frozen query
        return x.new_zeros(len(x), 0)


def test_features_are_found_query_first_and_switched_by_when():
    assert list(frozen_features(Marked(use_extra=True))) == [QUERY, "extra"]
    assert list(frozen_features(Marked(use_extra=False))) == [QUERY]
    assert list(frozen_features(Unmarked(use_extra=True))) == ["extra"]


def test_only_a_marked_benchmark_query_reads_the_benchmarks_cache():
    assert reads_benchmark_queries(Marked(False)) and not reads_benchmark_queries(Marked(False, query_token="pre"))
    assert not reads_benchmark_queries(Unmarked(True))


def test_served_rows_are_returned_instead_of_computing_and_only_within_the_block():
    m, x, rows = Marked(use_extra=True), torch.ones(2, 3), torch.full((2, 3), 7.0)
    with serving(m, {QUERY: rows}):
        assert m.query(x) is rows and torch.equal(m.extra(x), 3 * x)   # extra not served: computed
    assert torch.equal(m.query(x), x + 1) and m.calls == ["extra", "query"]
    assert "_served" not in m.__dict__ and not dict(m.named_buffers())   # no state left on the module


def test_a_pass_serves_its_queries_until_it_ends():
    m, queries, data, other = Marked(False), torch.arange(6.0).reshape(3, 2), [0, 1, 2], [0, 1, 2]
    with serving_pass(m, data, queries):
        assert pass_queries(m, data) is queries
        assert pass_queries(m, other) is None       # a pass over other data (the hypercube's test sets) computes
    assert pass_queries(m, data) is None
    with serving_pass(m, data, None):
        assert pass_queries(m, data) is None
    with pytest.raises(ValueError, match="3 cached queries for 2 images"), serving_pass(m, [0, 1], queries):
        pass
