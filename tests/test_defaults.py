"""One source of truth for defaults: every value the shipped config.yaml sets equals the typed default
(the dataclasses mirror config.yaml; a setting config.yaml leaves out has its default only in the dataclass)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from conftest import REPO
from intact.config import BenchmarkConfig, HeadConfig, IntactConfig, OptimConfig, PretrainConfig
from intact.methods.coda_p import CodaConfig
from intact.methods.c_prompt import CPromptConfig
from intact.methods.ka_prompt import KAPromptConfig
from intact.methods.dualprompt import DualPromptConfig
from intact.methods.ewc import EwcConfig
from intact.methods.finetune import FinetuneConfig
from intact.methods.inflora import InfloraConfig
from intact.methods.joint import JointConfig
from intact.methods.l2p import L2PConfig
from intact.methods.lwf import LwfConfig
from intact.methods.network import NetworkConfig, NetworkEwcConfig, NetworkLwfConfig
from intact.methods.s_prompts import SPromptsConfig
from intact.paths import run_dir

CFG = yaml.safe_load((REPO / "config.yaml").read_text())
SECTIONS = {
    "methods.coda_p": CodaConfig, "methods.l2p": L2PConfig, "methods.dualprompt": DualPromptConfig,
    "methods.finetune": FinetuneConfig, "methods.ewc": EwcConfig, "methods.lwf": LwfConfig, "methods.joint": JointConfig,
    "methods.inflora": InfloraConfig, "methods.s_prompts": SPromptsConfig,
    "methods.c_prompt": CPromptConfig, "methods.ka_prompt": KAPromptConfig,
    "methods.net_finetune": NetworkConfig, "methods.net_ewc": NetworkEwcConfig, "methods.net_lwf": NetworkLwfConfig,
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


def test_every_method_section_of_the_config_is_covered():
    assert {f"methods.{m}" for m in CFG["methods"]} <= set(SECTIONS)


def test_run_folder_has_one_spelling():
    assert run_dir("digits", "coda_p+intact", 0) == "results/runs/digits/coda_p+intact/seed0"
