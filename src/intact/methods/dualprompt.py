"""DualPrompt (Wang et al., ECCV 2022): a shared G-prompt in the first blocks, a task-keyed E-prompt in the
next ones; the task's own E-prompt in training, the best key's at test."""

from __future__ import annotations

from dataclasses import dataclass

from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class DualPromptSettings:
    """``methods.dualprompt`` (reference: g 6 at blocks 0-1, e 20 at blocks 2-4 of 12)."""

    g_length: int = setting(4, "G-prompt length (halves: keys, values)", minimum=2, multipleOf=2)
    g_layers: tuple[int, ...] = setting((0,), "blocks that get the shared G-prompt", items={"minimum": 0})
    e_length: int = setting(8, "E-prompt length (halves: keys, values)", minimum=2, multipleOf=2)
    e_layers: tuple[int, ...] = setting((1, 2), "blocks that get the task's E-prompt", minItems=1, items={"minimum": 0})
    match_weight: float = setting(1.0, "weight of the key-matching loss mean_b (1 - cos(q_b, k_task))", minimum=0)


METHOD = Method("dualprompt", DualPromptSettings, "intact.methods.impl.dualprompt:DualPrompt",
                "DualPrompt (Wang et al., ECCV 2022)", accepts_intact=True, layer_keys=("g_layers", "e_layers"))
