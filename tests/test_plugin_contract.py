"""What a plugin author learns from the pages, and the code holds them to (issue 43 item 6): the pretraining
contract of a benchmark, checked where the type is declared (before any job)."""

from __future__ import annotations

import textwrap

import pytest

from conftest import tiny_config, write_config
from intact.data.declare import BenchmarkSettings, BenchmarkType
from test_plugins import add_plugin, run_cli

#: a benchmark module declaring ``pretrains=True``; ``{body}`` is its implementation's body
PRETRAINING = '''
from dataclasses import dataclass
from intact.data.base import Benchmark
from intact.data.declare import BenchmarkSettings, BenchmarkType

@dataclass(frozen=True)
class S(BenchmarkSettings):
    pass

class Base(Benchmark):
    def pretrain_set(self):
        return []

class Impl({base}):
{body}

BENCHMARK = BenchmarkType("{name}", S, "{name}_mod:Impl", "a plugin", tasks=("a", "b"), num_classes=2,
                          pretrains=True)
'''


def declare(tmp_path, monkeypatch, name: str, body: str, base: str = "Benchmark"):
    """Import the declaration of ``PRETRAINING`` (a module in ``tmp_path``)."""
    import importlib

    source = PRETRAINING.format(name=name, base=base, body=textwrap.indent(body, "    "))
    (tmp_path / f"{name}_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(f"{name}_mod").BENCHMARK


def test_a_pretraining_benchmark_without_its_pretraining_sets_is_refused_where_it_is_declared(tmp_path, monkeypatch):
    with pytest.raises(TypeError) as err:
        declare(tmp_path, monkeypatch, "nopre", "def train_set(self, task, eval_split='test'):\n    return []\n")
    assert str(err.value) == ("benchmark 'nopre': pretrains=True, but its implementation 'nopre_mod:Impl' defines no "
                              "pretrain_set() and no clean_test_set() (docs/adding-a-benchmark.md, Pretraining)")
    # one inherited from a base class of its module (the Benchmark base's own, which raise, do not count)
    with pytest.raises(TypeError, match=r"defines no clean_test_set\(\) \("):
        declare(tmp_path, monkeypatch, "halfpre", "pass\n", base="Base")
    both = declare(tmp_path, monkeypatch, "bothpre", "def clean_test_set(self):\n    return []\n", base="Base")
    assert both.pretrains
    # a base imported from another module: the built-in digits implementation has both
    digits = BenchmarkType("subdigits", BenchmarkSettings, "intact.data.impl.digits:DigitsBenchmark", "x",
                           tasks=("a",), num_classes=10, pretrains=True)
    assert digits.pretrains


@pytest.mark.slow
def test_intact_validate_refuses_a_config_with_such_a_benchmark_in_one_line(tmp_path):
    site = tmp_path / "site"
    add_plugin(site, "nopre_dist", {"nopre": "nopre_mod:BENCHMARK"},
               {"nopre_mod": PRETRAINING.format(name="nopre", base="Benchmark", body="    pass")},
               "intact.benchmarks")
    cfg = tiny_config()
    cfg["benchmarks"]["nopre"] = {"type": "nopre", "backbone": "vit_digits"}
    write_config(tmp_path, cfg)
    bad = run_cli(site, "validate", str(tmp_path / "config.yaml"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "benchmark type 'nopre' cannot be loaded: entry point 'nopre = nopre_mod:BENCHMARK'" in bad.stderr
    assert "pretrains=True, but its implementation 'nopre_mod:Impl' defines no pretrain_set()" in bad.stderr
