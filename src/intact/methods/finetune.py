"""Sequential fine-tuning of one shared prefix prompt + the head: the no-protection lower bound.

Also the base of the other non-prompt baselines (``ewc``, ``lwf``, ``joint``): they train the same set -
one prompt per prompted layer (no pool, no selection) and the shared head - and add only their own way
of limiting forgetting. Each keeps its own config section (``methods.<name>``), so its settings (and its
run hash) stay its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from intact.config import build_dataclass
from intact.methods.prompt import PromptMethod
from intact.models.shared_prompt import SharedPrompt


@dataclass(frozen=True)
class FinetuneConfig:
    """``methods.finetune`` in config.yaml: the shared prompt (the same blocks as coda_p; reference: 0-4)."""

    length: int = 8
    layers: tuple[int, ...] = (0, 1, 2)


class Finetune(PromptMethod):
    """One prompt for every image and task, trained with cross-entropy only."""

    CONFIG: ClassVar[type] = FinetuneConfig
    SECTION: ClassVar[str] = "methods.finetune"

    def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
        self.cfg = build_dataclass(self.CONFIG, self.run.settings, self.SECTION)
        self.check_layers(f"{self.SECTION}.layers", self.cfg.layers)
        return SharedPrompt(embed_dim, self.cfg.length, self.cfg.layers)
