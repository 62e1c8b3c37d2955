"""Joint training, the upper bound: finetune's trainable set, trained afresh at every task on the union of the
tasks so far; declared in :mod:`intact.methods.joint`."""

from __future__ import annotations

from typing import Any

from torch.utils.data import ConcatDataset

from intact.methods.impl.finetune import Finetune


class Joint(Finetune):
    """Fine-tuning from scratch on all training data seen so far."""

    def training_data(self, bench: Any, task: int) -> Any:
        return ConcatDataset([bench.train_set(t, self.run.eval_split) for t in range(task + 1)])
