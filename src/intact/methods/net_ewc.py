"""EWC (online, Fishers summed) on a whole network: net_finetune + the EWC penalty."""

from __future__ import annotations

from dataclasses import dataclass

from intact.methods.declare import Method
from intact.settings import setting
from intact.methods.net_finetune import NetworkSettings, check


@dataclass(frozen=True)
class NetworkEwcSettings(NetworkSettings):
    """``methods.net_ewc``."""

    lambda_ewc: float = setting(100.0, "weight of the EWC penalty", minimum=0)


METHOD = Method("net_ewc", NetworkEwcSettings, "intact.methods.shared.network:NetworkMethod", "EWC on a whole network",
                uses_backbone=False, penalties=("ewc",), check=check)
