"""L2P(++): top-k key-prompt selection, prefix tuning at block 0 (the CODA-Prompt code's L2P++)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from intact.config import build_dataclass
from intact.methods.prompt import PromptMethod
from intact.models.l2p import L2PPool


@dataclass(frozen=True)
class L2PConfig:
    """``methods.l2p`` in config.yaml (reference: pool 30, length 20, top-5, block 0)."""

    pool_size: int = 10
    length: int = 8
    top_k: int = 3
    layers: tuple[int, ...] = (0,)
    match_weight: float = 1.0


class L2P(PromptMethod):
    """L2P (Wang et al., CVPR 2022) with prefix tuning, as described in the paper's Preliminaries."""

    def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
        cfg = build_dataclass(L2PConfig, self.run.settings, "methods.l2p")
        self.check_layers("methods.l2p.layers", cfg.layers)
        return L2PPool(embed_dim, cfg.pool_size, cfg.length, cfg.top_k, cfg.layers, cfg.match_weight)
