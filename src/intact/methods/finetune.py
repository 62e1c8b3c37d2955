"""Sequential fine-tuning of one shared prefix prompt + the head: the no-protection lower bound.

Its trainable set - one prompt per prompted layer (no pool, no selection) and the shared head - is also
that of ``ewc``, ``lwf`` and ``joint``, which add only their own way of limiting forgetting (a penalty,
or the data). Each keeps its own config section (``methods.<name>``), so its settings (and its run hash)
stay its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class FinetuneSettings:
    """``methods.finetune``: the shared prompt (the same blocks as coda_p; reference: 0-4)."""

    length: int = setting(8, "prompt length per layer (halves: keys, values)", minimum=2,
                          multipleOf=2)
    layers: tuple[int, ...] = setting((0, 1, 2), "blocks that get the shared prefix prompt", minItems=1,
                                      items={"minimum": 0})


METHOD = Method("finetune", FinetuneSettings, "intact.methods.impl.finetune:Finetune",
                "sequential fine-tuning of one shared prompt + head", accepts_intact=True, layer_keys=("layers",))
