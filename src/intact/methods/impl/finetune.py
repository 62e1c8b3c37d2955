"""Sequential fine-tuning of one shared prefix prompt + the head; declared in :mod:`intact.methods.finetune` (the
implementation of ``ewc`` and ``lwf`` too, which add their declared penalties)."""

from __future__ import annotations

from intact.methods.shared.prompt import PromptMethod
from intact.models.shared_prompt import SharedPrompt


class Finetune(PromptMethod):
    """One prompt for every image and task, trained with cross-entropy (+ the declared penalties)."""

    def build_pool(self, embed_dim: int, num_tasks: int) -> SharedPrompt:
        return SharedPrompt(embed_dim, self.cfg.length, self.cfg.layers)
