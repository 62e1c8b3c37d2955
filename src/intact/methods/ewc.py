"""EWC (Kirkpatrick et al., 2017) on the shared prompt + head: finetune's trainable set + the EWC penalty
(:class:`intact.methods.shared.penalties.EwcPenalty`)."""

from __future__ import annotations

from dataclasses import dataclass

from intact.methods.declare import Method
from intact.methods.finetune import FinetuneSettings
from intact.settings import setting


@dataclass(frozen=True)
class EwcSettings(FinetuneSettings):
    """``methods.ewc``: the penalty ``(lambda_ewc / 2) * sum F (theta - theta*)^2``."""

    lambda_ewc: float = setting(100.0, "weight of the EWC penalty", minimum=0)


METHOD = Method("ewc", EwcSettings, "intact.methods.impl.finetune:Finetune",
                "EWC (Kirkpatrick et al., 2017) on one shared prompt + head", layer_keys=("layers",),
                penalties=("ewc",))
