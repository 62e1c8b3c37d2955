"""DualPrompt: a shared G-prompt in the first blocks, a task-keyed E-prompt in the next ones."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from intact.config import build_dataclass
from intact.methods.prompt import PromptMethod
from intact.models.dualprompt import DualPromptPool


@dataclass(frozen=True)
class DualPromptConfig:
    """``methods.dualprompt`` in config.yaml (reference: g 6 at blocks 0-1, e 20 at blocks 2-4)."""

    g_length: int = 4
    g_layers: tuple[int, ...] = (0,)
    e_length: int = 8
    e_layers: tuple[int, ...] = (1, 2)
    match_weight: float = 1.0


class DualPrompt(PromptMethod):
    """DualPrompt (Wang et al., ECCV 2022): the task's own E-prompt in training, the best key's at test."""

    def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
        cfg = build_dataclass(DualPromptConfig, self.run.settings, "methods.dualprompt")
        self.check_layers("methods.dualprompt.g_layers", cfg.g_layers)
        self.check_layers("methods.dualprompt.e_layers", cfg.e_layers)
        return DualPromptPool(embed_dim, num_tasks, cfg.g_length, cfg.g_layers, cfg.e_length, cfg.e_layers, cfg.match_weight)
