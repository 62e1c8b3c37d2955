"""The embedded digits benchmark: deterministic, disjoint splits, a validation part; a benchmark's preview."""

import json

import numpy as np
import pytest
import torch

from conftest import tiny_config
from intact.config import benchmark_config
from intact.data import open_benchmark
from intact.data.base import Benchmark, Preview
from intact.data.digits import prepare
from intact.data.domains import DOMAINS, apply_domain
from intact.hashing import sha256_file
from intact.layering import load_file


def test_prepare_is_deterministic_and_splits_are_disjoint(tmp_path, tiny_bench):
    cfg = benchmark_config(tiny_config(), "digits")
    again = prepare(cfg, tmp_path / "again")
    shipped = tiny_bench["manifest"].parent / "data.safetensors"
    assert sha256_file(again.parent / "data.safetensors") == sha256_file(shipped)
    b = open_benchmark(tiny_bench["manifest"])
    t = b._t
    train, test = set(t["train_index"].tolist()), set(t["test_index"].tolist())
    assert not train & test
    assert len(train) + len(test) + len(t["pretrain_y"]) == 1797
    assert b.num_tasks == 3 and b.num_classes == 10 and b.task_names == ["blur", "noise", "edges"]
    # validation is a stratified part of the training data, disjoint from what eval_split=val trains on
    n_val = int(t["val_mask"].sum())
    assert len(b.train_set(0, "val")) + n_val == len(b.train_set(0, "test"))
    assert len(b.eval_set(0, "val")) == n_val
    assert torch.bincount(b.eval_set(0, "val").tensors[1], minlength=10).min() >= 10
    # every task shows the same images under another domain
    assert torch.equal(b.train_set(0).tensors[1], b.train_set(2).tensors[1])
    assert not torch.equal(b.train_set(0).tensors[0], b.train_set(2).tensors[0])


def test_every_domain_is_deterministic_and_in_range():
    x = torch.rand(6, 1, 32, 32)
    for name in DOMAINS:
        a, b = apply_domain(name, x, 7), apply_domain(name, x, 7)
        assert torch.equal(a, b), name
        assert a.shape == x.shape and a.min() >= 0 and a.max() <= 1, name
        assert not torch.equal(a, x), name


def test_default_sequence_has_at_least_ten_domains():
    from conftest import REPO

    cfg = load_file(REPO / "config.yaml")
    assert len(cfg["benchmarks"]["digits"]["domains"]) >= 10


def test_schema_lists_exactly_the_registered_domains():
    from intact.schema import schema

    enum = schema()["$defs"]["bench_digits"]["properties"]["domains"]["items"]["enum"]
    assert sorted(enum) == sorted(DOMAINS)


class _Items(torch.utils.data.Dataset):
    """The same rows as a TensorDataset, but not one: the loader takes its DataLoader path."""

    def __init__(self, data: torch.utils.data.TensorDataset):
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]


@pytest.mark.parametrize("drop_last", [False, True])
def test_tensor_batches_are_dataloaders_bit_for_bit(tiny_bench, drop_last):
    """The digits batches gathered by index (intact.data.loader._rows) are DataLoader's collated items bit
    for bit - values, dtype, shape, a fresh tensor each - for training (from a later batch on too) and
    evaluation."""
    from intact.data.loader import eval_batches, train_batches

    bench = open_benchmark(tiny_bench["manifest"])
    for data in (bench.train_set(1), bench.eval_set(2)):
        assert isinstance(data, torch.utils.data.TensorDataset)
        for first in (0, 2):
            fast = list(train_batches(data, seed=3, task=1, epoch=1, batch_size=64, first=first, drop_last=drop_last,
                                      keys=True))
            slow = list(train_batches(_Items(data), seed=3, task=1, epoch=1, batch_size=64, first=first,
                                      drop_last=drop_last, keys=True))
            assert len(fast) == len(slow) > 1
            for a, b in zip(fast, slow):
                for u, v in zip(a, b):
                    assert u.dtype == v.dtype and u.shape == v.shape and torch.equal(u, v)
        fast, slow = list(eval_batches(data, 100)), list(eval_batches(_Items(data), 100))
        assert len(fast) == len(slow) > 1
        for (x, y), (u, v) in zip(fast, slow):
            assert x.dtype == u.dtype and torch.equal(x, u) and y.dtype == v.dtype and torch.equal(y, v)
            assert x.data_ptr() != data.tensors[0].data_ptr()  # a copy: a caller may change it in place


def _mismatch(manifest, expected):
    from intact.data.manifest import ManifestError

    with pytest.raises(ManifestError) as err:
        open_benchmark(manifest, expected)
    msg = str(err.value)
    assert "\n" not in msg and f"snakemake --forcerun {manifest}" in msg, msg
    return msg


def test_a_job_refuses_data_prepared_otherwise_than_its_run(tiny_bench):
    """Every job opens the prepared data with its resolved benchmark (open_benchmark(manifest, expected)): the
    name, tasks in order, class count, image shape and the settings it was prepared with must match."""
    import dataclasses

    cfg = benchmark_config(tiny_config(), "digits")
    manifest = tiny_bench["manifest"]
    assert open_benchmark(manifest, cfg).task_names == ["blur", "noise", "edges"]
    assert open_benchmark(manifest, dataclasses.replace(cfg, backbone="other")).num_tasks == 3  # not a data setting
    swap = dataclasses.replace(cfg, domains=("noise", "blur", "edges"))
    assert ("benchmark 'digits' (type 'digits'): " in _mismatch(manifest, swap) and
            "tasks ['blur', 'noise', 'edges'], the config ['noise', 'blur', 'edges']" in _mismatch(manifest, swap))
    msg = _mismatch(manifest, dataclasses.replace(cfg, split_seed=cfg.split_seed + 1, image_size=16))
    assert "image_shape [1, 32, 32], the config image_size 16" in msg and "config.split_seed 0, the config 1" in msg
    assert "config.image_size 32, the config 16" in msg and "benchmark 'other'" in _mismatch(
        manifest, dataclasses.replace(cfg, name="other"))


def test_a_manifest_is_held_to_its_schema(tmp_path):
    from intact.data.manifest import ManifestError, check_manifest

    cfg = benchmark_config(tiny_config(), "digits")
    path = tmp_path / "manifest.json"
    path.write_text('{"name": "digits", "type": "digits", "num_classes": 10, "tasks": [{"name": "blur"}], "files": {}}')
    msg = str(pytest.raises(ManifestError, check_manifest, path, cfg, written=True).value)
    assert msg == (f"benchmark 'digits' (type 'digits'): {path} does not match the config: the manifest: 'benchmark' "
                   "is a required property (the manifest schema: intact.data.manifest.MANIFEST_SCHEMA) (its prepare "
                   "must write what the config declares)"), msg
    path.write_text('{"benchmark": "digits", "type": "digits", "num_classes": 10, "tasks": [{"name": "blur"}], '
                    '"files": {"data.safetensors": "abc"}}')
    msg = str(pytest.raises(ManifestError, check_manifest, path, cfg).value)
    assert "files.data.safetensors: 'abc' does not match" in msg


#: a benchmark plugin whose prepare writes its declared tasks, not the config's ``domains``
ROTATED = '''
import json
from dataclasses import dataclass
from pathlib import Path
from intact.data.declare import BenchmarkSettings, BenchmarkType
from intact.settings import setting

TASKS = ("rot0", "rot30", "rot60", "rot90")

@dataclass(frozen=True)
class Settings(BenchmarkSettings):
    domains: tuple[str, ...] = setting((), "the tasks", minItems=1, uniqueItems=True)

class Rotated:
    @staticmethod
    def prepare(cfg, out_dir):
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        manifest = {"benchmark": cfg.name, "type": cfg.type, "num_classes": 10, "features": 64,
                    "tasks": [{"name": t} for t in TASKS[:len(cfg.tasks)]], "files": {}}
        (out / "manifest.json").write_text(json.dumps(manifest))
        return out / "manifest.json"

BENCHMARK = BenchmarkType("rotated", Settings, "rotated_mod:Rotated", "rotations", tasks=TASKS, num_classes=10,
                          parallel_prepare=False)
'''


def test_a_plugin_whose_prepare_ignores_the_domains_is_refused_when_it_writes(tmp_path, monkeypatch):
    """Its prepare job fails (every train_task needs its manifest) naming the plugin; the manifest is removed."""
    import intact.data
    from intact.data import BENCHMARKS, benchmark_settings, prepare_benchmark
    from intact.data.declare import BenchmarkType, use_registry
    from intact.data.manifest import ManifestError
    from intact.registry import Registry
    from test_plugins import add_plugin

    add_plugin(tmp_path, "rotated_dist", {"rotated": "rotated_mod:BENCHMARK"}, {"rotated_mod": ROTATED},
               "intact.benchmarks")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("benchmark type", BenchmarkType, "intact.data", "BENCHMARK", "intact.benchmarks")
    monkeypatch.setattr(intact.data, "BENCHMARKS", registry)
    use_registry(registry)
    try:
        cfg = benchmark_settings({"name": "rot", "type": "rotated", "backbone": "vit_digits",
                                  "domains": ["rot0", "rot30", "rot90"]})
        msg = str(pytest.raises(ManifestError, prepare_benchmark, cfg, tmp_path / "rot").value)
    finally:
        use_registry(BENCHMARKS)
    assert msg == (f"benchmark 'rot' (type 'rotated', from entry point 'rotated = rotated_mod:BENCHMARK' (group "
                   f"'intact.benchmarks') of distribution 'rotated_dist 0.1'): {tmp_path / 'rot/manifest.json'} does "
                   "not match the config: tasks ['rot0', 'rot30', 'rot60'], the config ['rot0', 'rot30', 'rot90'] "
                   "(its prepare must write what the config declares)"), msg
    assert not (tmp_path / "rot/manifest.json").exists()


class _Listed(Benchmark):
    """A benchmark that lists two tasks and gives its preview (the contract: preview(), drawn by the report)."""

    def train_set(self, task, eval_split="test"):
        return []

    def eval_set(self, task, eval_split="test"):
        return []

    def preview(self):
        rng = np.random.default_rng(0)
        rows = {"grey": rng.random((3, 8, 8, 1)), "rgb": rng.random((2, 8, 8, 3))}
        return Preview("two rows", rows, {"grey": [0, 1, 0], "rgb": [1, 1]}, {"rgb": "2 / 1"})


def test_the_report_layer_draws_a_benchmark_preview(tmp_path, tiny_bench):
    """data/ gives the preview's images (Benchmark.preview -> Preview); intact.report.plots.draw_preview draws
    them (a class that draws its own, 0.1's contract, is refused where it is declared: tests/test_plugins.py)."""
    from intact.report.plots import draw_preview

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"benchmark": "listed", "tasks": [{"name": "a"}, {"name": "b"}], "num_classes": 2}))
    draw_preview(_Listed(manifest), tmp_path / "listed.png")
    assert (tmp_path / "listed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    digits = open_benchmark(tiny_bench["manifest"]).preview()
    assert list(digits.rows) == ["clean", "blur", "noise", "edges"] and digits.labels["clean"] == list(range(10))
    assert all(x.shape == (10, 32, 32, 1) and 0 <= x.min() <= x.max() <= 1 for x in digits.rows.values())


def test_digits_split_fractions_are_refused_at_validation_exactly_where_scikit_learn_refuses_the_split():
    """``benchmarks.<b>.{pretrain,test,val}_fraction`` near 0 or 1 passed validation, and the prepare job then failed
    with scikit-learn's error (fewer images than classes on a side). The declared check sizes the three splits as
    scikit-learn does, without the images: it refuses a fraction exactly where the real split fails, at each
    boundary (9 and 10 images on either side of each split) and over a grid."""
    from sklearn.datasets import load_digits

    from intact.data.digits import DIGITS, BenchmarkConfig, _stratified_split, check, split_sizes

    labels = load_digits().target

    def real_sizes(pf: float, tf: float, vf: float) -> list[tuple[int, int]] | None:
        try:
            continual, pretrain = _stratified_split(labels, pf, 0)
            train, test = _stratified_split(labels[continual], tf, 1)
            fit, val = _stratified_split(labels[continual[train]], vf, 2)
        except ValueError:
            return None
        return [(len(pretrain), len(continual)), (len(test), len(train)), (len(val), len(fit))]

    defaults = {"pretrain_fraction": 0.4, "test_fraction": 0.4, "val_fraction": 0.2}
    cases = [dict(defaults, **{k: f}) for k in defaults for f in (1e-6, 0.01, 0.05, 0.5, 0.95, 0.999)]
    sizes = split_sizes(BenchmarkConfig(name="d", type="digits", backbone="b"))
    assert sizes[0] == ("pretrain_fraction", 719, DIGITS - 719)
    for (key, taken, kept) in sizes:  # the fractions that leave 9 or 10 images on either side of each split
        n = taken + kept
        cases += [dict(defaults, **{key: f}) for t in (9, 10, n - 10, n - 9) for f in ((t - 0.5) / n, t / n)]
    cases += [dict(zip(defaults, fs)) for fs in np.random.default_rng(0).uniform(0.002, 0.99, (150, 3))]
    refused = 0
    for fractions in cases:
        cfg = BenchmarkConfig(name="d", type="digits", backbone="b", **fractions)
        real = real_sizes(*fractions.values())
        problems = list(check(cfg))
        assert (real is None) == bool(problems), (fractions, real, problems)
        if real is not None:
            assert real == [(t, k) for _, t, k in split_sizes(cfg)], fractions
        refused += bool(problems)
    assert refused >= 24, refused


@pytest.mark.slow
def test_digits_without_domains_prepares_every_declared_domain(tmp_path):
    """``domains`` unset means every domain (its description; the run plans 14 tasks): before 2026-12-01 prepare
    read the unset tuple and wrote no task, and the prepare job failed on its own manifest's check."""
    from intact.data.digits import DIGIT_DOMAINS, BenchmarkConfig, prepare

    manifest = json.loads(prepare(BenchmarkConfig(name="d", type="digits", backbone="b", image_size=8),
                                  tmp_path).read_text())
    assert [t["name"] for t in manifest["tasks"]] == list(DIGIT_DOMAINS)
