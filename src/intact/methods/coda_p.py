"""CODA-Prompt: attention-weighted sums of prompt components (prefix tuning at the first blocks)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from intact.config import build_dataclass
from intact.methods.prompt import PromptMethod
from intact.models.coda import CodaPromptPool


@dataclass(frozen=True)
class CodaConfig:
    """``methods.coda_p`` in config.yaml (defaults mirror it, tests/test_defaults.py; reference code:
    pool 100 at blocks 0-4 of 12)."""

    pool_size: int = 40
    length: int = 8
    layers: tuple[int, ...] = (0, 1, 2)
    ortho_mu: float = 0.0


class CodaPrompt(PromptMethod):
    """CODA-Prompt (Smith et al., CVPR 2023) as described in the paper's Preliminaries."""

    def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
        cfg = build_dataclass(CodaConfig, self.run.settings, "methods.coda_p")
        self.check_layers("methods.coda_p.layers", cfg.layers)
        return CodaPromptPool(embed_dim, cfg.pool_size, cfg.length, cfg.layers, num_tasks, cfg.ortho_mu)
