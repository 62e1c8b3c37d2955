"""Joint training, the upper bound: task ``t`` trains a fresh model on the union of tasks ``0..t``.

Nothing continues from the previous task (neither its state nor its hypercubes), so column ``t`` of R is
what a model trained on every domain seen so far achieves, and the last column is joint training on
the whole sequence. Same trainable set as ``finetune`` (one shared prompt + head), same epochs per task
(so later tasks take more steps: they see more data).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import ConcatDataset, Dataset

from intact.data.base import Benchmark
from intact.methods.finetune import Finetune, FinetuneConfig


@dataclass(frozen=True)
class JointConfig(FinetuneConfig):
    """``methods.joint`` in config.yaml."""


class Joint(Finetune):
    """Fine-tuning from scratch on all training data seen so far."""

    CONFIG = JointConfig
    SECTION = "methods.joint"

    def training_data(self, bench: Benchmark, task: int) -> Dataset:
        return ConcatDataset([bench.train_set(t, self.run.eval_split) for t in range(task + 1)])
