"""The embedded digits benchmark: deterministic, disjoint splits, a validation part."""

import pytest
import torch

from conftest import tiny_config
from intact.config import benchmark_config
from intact.data import open_benchmark
from intact.data.digits import prepare
from intact.data.domains import DOMAINS, apply_domain
from intact.hashing import sha256_file


def test_prepare_is_deterministic_and_splits_are_disjoint(tmp_path, tiny_bench):
    cfg = benchmark_config(tiny_config(), "digits")
    again = prepare(cfg, tmp_path / "again")
    assert sha256_file(again.parent / "data.safetensors") == sha256_file(tiny_bench["manifest"].parent / "data.safetensors")
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
    import yaml

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
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
            fast = list(train_batches(data, seed=3, task=1, epoch=1, batch_size=64, first=first, drop_last=drop_last, keys=True))
            slow = list(train_batches(_Items(data), seed=3, task=1, epoch=1, batch_size=64, first=first, drop_last=drop_last, keys=True))
            assert len(fast) == len(slow) > 1
            for a, b in zip(fast, slow):
                for u, v in zip(a, b):
                    assert u.dtype == v.dtype and u.shape == v.shape and torch.equal(u, v)
        fast, slow = list(eval_batches(data, 100)), list(eval_batches(_Items(data), 100))
        assert len(fast) == len(slow) > 1
        for (x, y), (u, v) in zip(fast, slow):
            assert x.dtype == u.dtype and torch.equal(x, u) and y.dtype == v.dtype and torch.equal(y, v)
            assert x.data_ptr() != data.tensors[0].data_ptr()  # a copy: a caller may change it in place
