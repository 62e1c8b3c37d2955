"""The test kit's tiny benchmark cache (intact.testing.tiny_bench): a hit is the build, bit for bit, and the key
changes with everything that decides the build."""

from __future__ import annotations

from pathlib import Path

import pytest

import intact.testing as kit
from intact.testing import ENV_CACHE, tiny_bench_key, tiny_config


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _no_build(cfg, root, benchmark="digits"):
    raise AssertionError("built although the cache holds this benchmark")


def test_a_cache_hit_copies_the_sessions_build_bit_for_bit_and_builds_nothing(tiny_bench, tmp_path, monkeypatch):
    # the session's tiny benchmark went through the kit, so the run's cache holds it
    monkeypatch.setattr(kit, "_build_tiny_bench", _no_build)
    bench = kit.tiny_bench(tmp_path / "again")
    built = {k: v for k, v in _files(tiny_bench["root"]).items() if k != "paths.json"}
    assert _files(tmp_path / "again") == built and len(built) >= 4
    assert bench["manifest"] == tmp_path / "again/data/manifest.json" and bench["manifest"].is_file()
    assert bench["weights"] == tmp_path / "again/backbone.safetensors"


def _no_pretraining(*args, **kw):
    raise AssertionError("pretrained although another benchmark's build holds this backbone")


@pytest.mark.slow
def test_a_benchmark_pretraining_on_another_borrows_that_ones_build(tiny_bench, prepared_digits, tmp_path,
                                                                    monkeypatch):
    """digits_3 pretrains vit_digits on digits (as a plugin's benchmark reuses the digits ViT): its tiny
    benchmark takes the digits data and backbone from the session's digits build, and nothing pretrains."""
    import intact.pretrain

    # what is lent is what pretraining writes: the workflow's own pretrain_backbone job, in another process and
    # folder, wrote the same weights
    prepared = prepared_digits(tiny_config(), tmp_path / "prepared")
    weights = (tiny_bench["root"] / "backbone.safetensors").read_bytes()
    assert (prepared / "results/backbones/vit_digits.safetensors").read_bytes() == weights
    monkeypatch.setattr(intact.pretrain, "pretrain_backbone", _no_pretraining)
    bench = kit.tiny_bench(tmp_path / "d3", tiny_config(), "digits_3")
    files, session = _files(tmp_path / "d3"), _files(tiny_bench["root"])
    assert {k.removeprefix("pretrain_"): v for k, v in files.items() if k.startswith("pretrain_data/")} == \
        {k: v for k, v in session.items() if k.startswith("data/")}
    assert files["backbone.safetensors"] == weights and files["backbone.json"] == session["backbone.json"]
    assert bench["weights"] == tmp_path / "d3/backbone.safetensors" and bench["manifest"].is_file()
    assert files["data/manifest.json"] != session["data/manifest.json"]  # its own domains


def _fake_build(calls):
    def build(cfg, root, benchmark="digits"):
        calls.append(root)
        (root / "data").mkdir(parents=True)
        (root / "data/manifest.json").write_text("{}")
        (root / "backbone.safetensors").write_bytes(b"w" * 10)
    return build


@pytest.mark.slow
def test_off_builds_every_time_and_keeps_nothing(tmp_path, monkeypatch):
    calls: list[Path] = []
    monkeypatch.setattr(kit, "_build_tiny_bench", _fake_build(calls))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(ENV_CACHE, "off")
    kit.tiny_bench(tmp_path / "a")
    kit.tiny_bench(tmp_path / "b")
    assert calls == [tmp_path / "a", tmp_path / "b"] and not (tmp_path / "xdg").exists()
    monkeypatch.delenv(ENV_CACHE)                        # the default: the user's cache folder
    kit.tiny_bench(tmp_path / "c")
    kit.tiny_bench(tmp_path / "d")
    assert calls[2:] == [tmp_path / "c"] and _files(tmp_path / "d") == _files(tmp_path / "c")
    assert [p.name for p in (tmp_path / "xdg/intact/tiny_bench").iterdir()] == [tiny_bench_key(tiny_config())]


def test_an_unfinished_entry_is_rebuilt(tmp_path, monkeypatch):
    calls: list[Path] = []
    monkeypatch.setattr(kit, "_build_tiny_bench", _fake_build(calls))
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "cache"))
    entry = tmp_path / "cache" / tiny_bench_key(tiny_config())
    (entry / "data").mkdir(parents=True)                # a copy cut short: no "complete" marker
    (entry / "backbone.safetensors").write_bytes(b"half")
    kit.tiny_bench(tmp_path / "a")
    assert calls == [tmp_path / "a"] and (tmp_path / "a/backbone.safetensors").read_bytes() == b"w" * 10


def test_the_key_follows_what_decides_the_build(tmp_path, monkeypatch):
    cfg = tiny_config()
    key = tiny_bench_key(cfg)
    assert tiny_bench_key(tiny_config()) == key
    unrelated = tiny_config(methods=["l2p"])
    unrelated["optim"]["epochs"] = 3
    assert tiny_bench_key(unrelated) == key             # training settings do not decide the benchmark
    for edit in (lambda c: c["backbones"]["vit_digits"]["pretrain"].update(epochs=24),
                 lambda c: c["benchmarks"]["digits"].update(domains=["blur", "noise"]),
                 lambda c: c["benchmarks"]["digits"].update(split_seed=1)):
        changed = tiny_config()
        edit(changed)
        assert tiny_bench_key(changed) != key
    import intact.fingerprint

    real = intact.fingerprint.fingerprint
    monkeypatch.setattr(intact.fingerprint, "fingerprint", lambda: {**real(), "cpu_capability": "another"})
    assert tiny_bench_key(cfg) != key                   # another machine's floats
    monkeypatch.setattr(intact.fingerprint, "fingerprint", real)
    source = tmp_path / "module.py"
    source.write_text("x = 1\n")
    import intact.sources

    monkeypatch.setattr(intact.sources, "source_files", lambda *scripts: [str(source)])
    before = tiny_bench_key(cfg)
    source.write_text("x = 2\n")
    assert tiny_bench_key(cfg) != before                # edited code that preparing or pretraining runs


def test_the_key_reads_the_code_preparing_and_pretraining_import(monkeypatch):
    import intact.sources

    seen: list[str] = []
    real = intact.sources.source_files
    monkeypatch.setattr(intact.sources, "source_files", lambda *s: seen.extend(real(*s)) or real(*s))
    tiny_bench_key(tiny_config())
    names = {Path(p).relative_to(Path(kit.__file__).parent).as_posix() for p in seen}
    assert {"data/digits.py", "models/vit_digits.py", "seeding.py"} <= names  # what builds the data and the ViT


@pytest.mark.parametrize("what", ["data", "pretrain"])
def test_the_key_holds_the_modules_themselves(what, monkeypatch, tmp_path):
    import importlib

    import intact.sources

    module = importlib.import_module(f"intact.{what}")
    monkeypatch.setattr(intact.sources, "source_files", lambda *s: [])
    key = tiny_bench_key(tiny_config())
    copy = tmp_path / "copy.py"
    copy.write_text(Path(module.__file__).read_text() + "\n# edited\n")
    monkeypatch.setattr(module, "__file__", str(copy))
    assert tiny_bench_key(tiny_config()) != key
