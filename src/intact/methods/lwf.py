"""LwF (Li & Hoiem, 2017) on the shared prompt + head: finetune's trainable set + the distillation of the
previous task's logits (:class:`intact.methods.shared.penalties.LwfPenalty`)."""

from __future__ import annotations

from dataclasses import dataclass

from intact.methods.declare import Method
from intact.methods.finetune import FinetuneSettings
from intact.settings import setting


@dataclass(frozen=True)
class LwfSettings(FinetuneSettings):
    """``methods.lwf``: ``lambda_lwf * T^2 * KL(old || new)`` at temperature ``T``."""

    lambda_lwf: float = setting(1.0, "weight of the distillation term", minimum=0)
    temperature: float = setting(2.0, "distillation temperature T", exclusiveMinimum=0)


METHOD = Method("lwf", LwfSettings, "intact.methods.impl.finetune:Finetune",
                "LwF (Li & Hoiem, 2017) on one shared prompt + head", layer_keys=("layers",), penalties=("lwf",))
