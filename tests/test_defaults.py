"""Every default is declared once (intact.settings, a method's or a benchmark type's module), and config.yaml states
only what the default run chooses: it restates no declared default, so nothing has to be kept in step with the
declarations by hand."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import REPO
from intact.config import benchmark_config, load_config, resolve_run
from intact.data import BENCHMARKS
from intact.methods import METHODS
from intact.paths import run_dir
from intact.schema import schema
from intact.settings import BACKBONE_REQUIRED, SECTIONS, BackboneConfig, PretrainConfig, defaults
from intact.layering import load_file

CFG = load_file(REPO / "config.yaml")


def _restated(values: dict, declared: dict, keep: tuple[str, ...] = ()) -> dict:
    return {k: v for k, v in (values or {}).items() if k in declared and k not in keep and declared[k] == v}


def test_config_yaml_restates_no_declared_default():
    """A value config.yaml sets that equals its declaration's default is a copy to keep in step: there is none."""
    restated = {s: _restated(CFG.get(s), defaults(cls)) for s, cls in SECTIONS.items()}
    for name, bb in CFG["backbones"].items():
        restated[f"backbones.{name}"] = _restated(bb, defaults(BackboneConfig), keep=BACKBONE_REQUIRED)
        restated[f"backbones.{name}.pretrain"] = _restated(bb.get("pretrain"), defaults(PretrainConfig))
    for name, bench in CFG["benchmarks"].items():
        restated[f"benchmarks.{name}"] = _restated(bench, defaults(BENCHMARKS[bench["type"]].settings))
    for name, section in (CFG.get("methods") or {}).items():
        restated[f"methods.{name}"] = _restated(section, defaults(METHODS[name].settings))
    assert not {k: v for k, v in restated.items() if v}, restated


@pytest.mark.parametrize("section", SECTIONS)
def test_the_schema_of_a_shared_section_is_derived_from_its_declaration(section):
    """Every declared field is a schema property with the declared description; nothing else is."""
    props = schema()["properties"][section]["properties"]
    fields = {f.name: f for f in dataclasses.fields(SECTIONS[section])}
    assert set(props) == set(fields)
    for name, f in fields.items():
        assert props[name].get("description") == (f.metadata.get("doc") or None), name


def test_a_run_of_the_default_config_gets_the_declared_defaults():
    cfg = load_config(REPO / "config.yaml", check_files=False)
    run = resolve_run(cfg, "digits", "coda_p+intact", 0)
    for section in ("head", "intact", "optim"):
        assert dataclasses.asdict(getattr(run, section)) == dataclasses.asdict(SECTIONS[section]())
    assert run.backbone.pretrain == PretrainConfig()
    digits = benchmark_config(cfg, "digits")
    assert (digits.image_size, digits.pretrain_fraction, digits.test_fraction, digits.val_fraction) == (32, .4, .4, .2)


def test_run_folder_has_one_spelling():
    assert run_dir("digits", "coda_p+intact", 0) == "results/runs/digits/coda_p+intact/seed0"
