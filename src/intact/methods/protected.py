"""Methods whose layers an :class:`~intact.regularizers.regularizer.IntactRegularizer` watches.

The regularizer keeps the hypercubes (saved with every task, with or without ``+intact``) and, with
``+intact``, adds the four terms; this class wires its hooks into the method interface.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

from intact.data.loader import eval_batches
from intact.methods.base import ContinualMethod
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.regularizer import IntactRegularizer


class ProtectedMethod(ContinualMethod):
    """A method whose layers an :class:`~intact.regularizers.regularizer.IntactRegularizer` (``self.reg``)
    watches: it keeps the hypercubes (with or without ``+intact``) and, with ``+intact``, adds the terms."""

    reg: IntactRegularizer

    @property
    def hypercubes(self) -> dict[str, Hypercube]:
        return self.reg.hypercubes

    @hypercubes.setter
    def hypercubes(self, cubes: dict[str, Hypercube]) -> None:
        self.reg.hypercubes = cubes

    def add_penalty(self, total: torch.Tensor, terms: dict[str, torch.Tensor], **teacher: Any) -> torch.Tensor:
        """Add the regularizer's terms of the last forward pass to ``total`` (and to the logged ``terms``)."""
        for name, value in self.reg.penalty(**teacher).items():
            terms[name] = value
            if name != "feat_gate":
                total = total + value
        return total

    def end_task(self, task: int, train_set: Dataset) -> dict[str, Any]:
        """Measure the certificate and update the cumulative hypercubes from a final pass over ``train_set``,
        both in eval mode whatever the caller's mode (which is restored afterwards)."""
        was_training = self.training
        self.eval()
        device = next(self.reg.model.parameters()).device
        batches = eval_batches(train_set, self.run.optim.eval_batch_size, device)
        # the training images' cached queries, in order, when the trainer passes them (intact.cache)
        acts = self.reg.collect(self.with_queries(self.predict, self.cached.get("eval_query")), (x for x, _ in batches))
        try:
            # still in eval mode: the certificate's samples must neither see batch statistics nor overwrite
            # the running statistics that are saved with the task
            return self.reg.end_task(task, acts)
        finally:
            self.train(was_training)
