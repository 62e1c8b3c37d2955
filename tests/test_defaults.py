"""The shared sections config.yaml spells out for the default run (head, intact, optim, the digits benchmark and
its backbone) agree with the typed defaults of :mod:`intact.settings`. Methods are not listed here: their
defaults exist once, in their declarations (tests/test_declarations.py)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from conftest import REPO
from intact.paths import run_dir
from intact.settings import BenchmarkConfig, HeadConfig, IntactConfig, OptimConfig, PretrainConfig

CFG = yaml.safe_load((REPO / "config.yaml").read_text())
SECTIONS = {
    "head": HeadConfig, "intact": IntactConfig, "optim": OptimConfig,
    "backbones.vit_digits.pretrain": PretrainConfig, "benchmarks.digits": BenchmarkConfig,
}


def _section(path: str) -> dict:
    node = CFG
    for part in path.split("."):
        node = node[part]
    return node


#: settings that belong to one config entry and have no meaningful shared default
OWN = {"benchmarks.digits": {"domains"}}


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


@pytest.mark.parametrize("path", SECTIONS)
def test_dataclass_defaults_equal_the_shipped_config(path):
    cls = SECTIONS[path]
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    shipped = _section(path)
    mismatched = {k: (defaults[k], v) for k, v in shipped.items()
                  if k in defaults and k not in OWN.get(path, ()) and _plain(defaults[k]) != v}
    assert not mismatched, f"{path}: dataclass default != config.yaml: {mismatched}"


def test_config_yaml_copies_no_method_defaults():
    """config.yaml keeps what the default run chooses: no method section repeats its declared defaults."""
    assert not CFG.get("methods")


def test_run_folder_has_one_spelling():
    assert run_dir("digits", "coda_p+intact", 0) == "results/runs/digits/coda_p+intact/seed0"
