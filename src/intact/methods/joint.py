"""Joint training, the upper bound: task ``t`` trains a fresh model on the union of tasks ``0..t``.

Nothing continues from the previous task (neither its state nor its hypercubes), so column ``t`` of R is
what a model trained on every domain seen so far achieves, and the last column is joint training on
the whole sequence. Same trainable set as ``finetune`` (one shared prompt + head), same epochs per task
(so later tasks take more steps: they see more data).
"""

from __future__ import annotations

from dataclasses import dataclass
from intact.methods.declare import Method
from intact.methods.finetune import FinetuneSettings


@dataclass(frozen=True)
class JointSettings(FinetuneSettings):
    """``methods.joint``: finetune's."""


METHOD = Method("joint", JointSettings, "intact.methods.impl.joint:Joint",
                "upper bound: fresh training on the union of tasks 0..t", layer_keys=("layers",),
                loads_previous_state=False)
