"""LwF on a whole network (distillation of the previous task's logits): net_finetune + the LwF penalty."""

from __future__ import annotations

from dataclasses import dataclass

from intact.methods.declare import Method
from intact.settings import setting
from intact.methods.net_finetune import NetworkSettings, check


@dataclass(frozen=True)
class NetworkLwfSettings(NetworkSettings):
    """``methods.net_lwf``."""

    lambda_lwf: float = setting(1.0, "weight of the distillation term", minimum=0)
    temperature: float = setting(2.0, "distillation temperature T", exclusiveMinimum=0)


METHOD = Method("net_lwf", NetworkLwfSettings, "intact.methods.shared.network:NetworkMethod", "LwF on a whole network",
                uses_backbone=False, penalties=("lwf",), check=check)
