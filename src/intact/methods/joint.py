"""Joint training, the upper bound: task ``t`` trains a fresh model on the union of tasks ``0..t``.

Nothing continues from the previous task (neither its state nor its hypercubes), so column ``t`` of R is
what a model trained on every domain seen so far achieves, and the last column is joint training on
the whole sequence. Same trainable set as ``finetune`` (one shared prompt + head), same epochs per task
(so later tasks take more steps: they see more data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from intact.methods.finetune import FinetuneSettings, implementation as finetune_implementation
from intact.methods.declare import Method


@dataclass(frozen=True)
class JointSettings(FinetuneSettings):
    """``methods.joint``: finetune's."""


def implementation() -> type:
    """The method itself (imports torch: only a job calls this)."""
    from torch.utils.data import ConcatDataset

    class Joint(finetune_implementation()):
        """Fine-tuning from scratch on all training data seen so far."""

        def training_data(self, bench: Any, task: int) -> Any:
            return ConcatDataset([bench.train_set(t, self.run.eval_split) for t in range(task + 1)])

    return Joint


METHOD = Method("joint", JointSettings, implementation, "upper bound: fresh training on the union of tasks 0..t",
                layer_keys=("layers",), loads_previous_state=False)
