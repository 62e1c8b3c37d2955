"""What a plugin author learns from the pages, and the code holds them to (issue 43 item 6): the pretraining
contract of a benchmark, checked where the type is declared (before any job); the head a method predicts with,
which InTAct protects and certifies."""

from __future__ import annotations

import copy
import textwrap
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from conftest import snakemake, tiny_config, write_config
from intact.data.declare import BenchmarkSettings, BenchmarkType
from intact.methods.shared.base import ContinualMethod, batch_loss, enter_task, leave_task
from intact.methods.shared.penalties import HypercubeRecorder, kept_hypercubes
from intact.regularizers.certificate import drift_certificate, width
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.regularizer import HypercubeTracker
from test_plugins import add_plugin, env, run_cli

#: no line naming a slow import (a loaded machine): the refusal is the only line
PATIENT = {"INTACT_SLOW_IMPORT_S": "1000"}

#: a benchmark module declaring ``pretrains=True``; ``{body}`` is its implementation's body
PRETRAINING = '''
from dataclasses import dataclass
from intact.data.base import Benchmark
from intact.data.declare import BenchmarkSettings, BenchmarkType
from intact.methods.shared.base import ContinualMethod
from intact.methods.shared.penalties import HypercubeRecorder, kept_hypercubes
from intact.regularizers.certificate import drift_certificate, width
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.regularizer import HypercubeTracker

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
    bad = run_cli(site, "validate", str(tmp_path / "config.yaml"), env_extra=PATIENT)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "benchmark type 'nopre' cannot be loaded: entry point 'nopre = nopre_mod:BENCHMARK'" in bad.stderr
    assert "pretrains=True, but its implementation 'nopre_mod:Impl' defines no pretrain_set()" in bad.stderr


# ---- the head a method predicts with is the head InTAct protects and certifies --------------------------------------
class TwoHeads(ContinualMethod):
    """Trains ``head`` and predicts with ``ema``, a copy of other weights (as an EMA head would be)."""

    def __init__(self):
        super().__init__(SimpleNamespace(optim=SimpleNamespace(eval_batch_size=16), seed=0), None)
        torch.manual_seed(0)
        self.head = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        self.ema = copy.deepcopy(self.head).requires_grad_(False)
        with torch.no_grad():
            self.ema[0].weight.mul_(2)
        self.books = HypercubeTracker(self.head, ["0", "2"])
        self.penalties.append(HypercubeRecorder(self.books, predicting=self.predicting_head))

    def forward_train(self, x):
        return self.head(x), None, None

    def predict(self, x):
        return self.ema(x)

    @contextmanager
    def predicting_head(self):
        yield self.ema

    def param_groups(self):
        return [{"params": list(self.head.parameters()), "lr": 0.1}]


def test_the_certificate_and_hypercubes_are_those_of_the_head_a_method_predicts_with():
    method = TwoHeads()
    data = TensorDataset(torch.randn(40, 4, generator=torch.Generator().manual_seed(1)), torch.zeros(40).long())
    enter_task(method, 0, data)
    leave_task(method, 0, data)
    hidden = torch.relu(method.ema[0](data.tensors[0])).detach()   # the input of the predicting head's layer "2"
    cube = Hypercube.from_activations(hidden, method.books.alpha, method.books.percentile_method)
    kept = kept_hypercubes(method)["2"]
    assert torch.equal(kept.lower, cube.lower) and torch.equal(kept.upper, cube.upper)
    box = kept_hypercubes(method)["0"]
    before = copy.deepcopy(method.ema)
    enter_task(method, 1, data)
    with torch.no_grad():
        method.ema[2].weight.add_(0.5)  # the predicting head drifts; the trained one does not
    info = leave_task(method, 1, data)
    expected = drift_certificate(list(method.ema), list(before), box.lower, box.upper)
    assert info["certificate"] == width(expected["lower"], expected["upper"]) > 0
    assert torch.equal(method.books.previous[2].weight, before[2].weight)  # the anchors: the predicting head's copy
    # the hooks went back to the trained head: a training step's terms read its layers' inputs
    batch_loss(method, data.tensors[0][:4], data.tensors[1][:4])
    assert method.books.inputs["0"].shape == (4, 4) and method.books.model is method.head


# ---- a plugin's deprecations reach its user: intact validate prints them, a job's log holds them --------------------
OLDWAY = {
    "oldway_mod": '''
import warnings
from intact.methods.declare import Method
from intact.methods.finetune import FinetuneSettings

warnings.warn("oldway: imported the old way", DeprecationWarning)


def check(settings, bench, backbone):
    warnings.warn("oldway: checked the old way", DeprecationWarning)
    return []


METHOD = Method("oldway", FinetuneSettings, "oldway_impl:OldWay", "finetune, with deprecations", check=check)
''',
    "oldway_impl": '''
import warnings
from intact.methods.impl.finetune import Finetune


class OldWay(Finetune):
    def begin_task(self, task, train_set):
        warnings.warn("oldway: started a task the old way", DeprecationWarning)
        super().begin_task(task, train_set)
''',
}


@pytest.fixture(scope="module")
def oldway(tmp_path_factory):
    site = tmp_path_factory.mktemp("oldway_site")
    add_plugin(site, "oldway_dist", {"oldway": "oldway_mod:METHOD"}, OLDWAY)
    return site


@pytest.mark.slow
def test_intact_validate_prints_a_plugins_deprecations(oldway, tmp_path):
    cfg = tiny_config(methods=["coda_p", "oldway"])
    write_config(tmp_path, cfg)
    proc = run_cli(oldway, "validate", str(tmp_path / "config.yaml"), env_extra=PATIENT)
    assert proc.returncode == 0 and "valid" in proc.stdout, proc.stderr
    for said in ("imported the old way", "checked the old way"):
        assert f"DeprecationWarning: oldway: {said}" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_plugins_deprecations_at_import_and_in_a_hook_are_in_the_jobs_log(oldway, prepared_digits, tmp_path):
    """The job imports its run's plugin inside its log (plugins load when a name is looked up: intact.plugins), so
    what the import says is there, as is what a hook says."""
    cfg = tiny_config(methods=["oldway"])
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise"]      # the session's two prepared domains
    cfg["tracking"]["enabled"] = False
    cfg["studies"] = {}
    prepared_digits(cfg, tmp_path)
    snakemake(tmp_path, env=env(oldway))
    logs = sorted((tmp_path / "results/logs/train_task").glob("digits/oldway/seed0/task*.log"))
    assert [p.name for p in logs] == ["task0.log", "task1.log"], logs
    for log in logs:
        for said in ("imported the old way", "started a task the old way"):
            assert f"DeprecationWarning: oldway: {said}" in log.read_text(), log.read_text()[-2000:]


# ---- the method contract: what ContinualMethod promises is what the page lists ------------------------------------
def test_the_method_surface_is_the_pages_and_at_most_eight_names_beyond_the_three_required_hooks():
    """Every public name of ``ContinualMethod`` beyond ``nn.Module``'s - its methods and the attributes its
    constructor sets - is a row of the first table of docs/adding-a-method.md's contract, and the reverse."""
    import re
    from pathlib import Path

    class Bare(ContinualMethod):
        def forward_train(self, x):
            return x, None, None

        def predict(self, x):
            return x

        def param_groups(self):
            return []

    torch_names = set(dir(nn.Module)) | set(vars(nn.Module()))
    names = {n for n in [*dir(ContinualMethod), *vars(Bare(None, None))] if not n.startswith("_")} - torch_names
    page = (Path(__file__).parents[1] / "docs/adding-a-method.md").read_text()
    table = page.split("## The contract")[1].split("\n\n")[2]
    listed = {re.match(r"\| `(?:self\.)?(\w+)", row).group(1) for row in table.splitlines()[2:]}
    assert names == listed
    required = {"forward_train", "predict", "param_groups"}
    assert required <= names and len(names - required) <= 8, sorted(names - required)
