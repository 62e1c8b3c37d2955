"""EWC on the shared prompt + head: a diagonal-Fisher quadratic penalty, accumulated over tasks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.utils.data import Dataset

from intact.data.loader import eval_batches
from intact.methods.finetune import Finetune, FinetuneConfig
from intact.regularizers.ewc import empirical_fisher, ewc_penalty


@dataclass(frozen=True)
class EwcConfig(FinetuneConfig):
    """``methods.ewc`` in config.yaml: the penalty ``(lambda_ewc / 2) * sum F (theta - theta*)^2``."""

    lambda_ewc: float = 100.0


class TensorStore(nn.Module):
    """Named buffers (saved with the trainable state); parameter names ``a.b.c`` are stored as ``a__b__c``."""

    def __init__(self, like: dict[str, torch.Tensor]):
        super().__init__()
        for name, t in like.items():
            self.register_buffer(name.replace(".", "__"), torch.zeros_like(t))

    def get(self, name: str) -> torch.Tensor:
        return getattr(self, name.replace(".", "__"))


class EwcMixin:
    """EWC (Kirkpatrick et al., 2017) in its online form: one anchor, the Fishers of all tasks summed.

    After task ``t``: ``F <- F + F_t`` (empirical Fisher of task ``t``'s training data) and ``theta* <-``
    the parameters after task ``t``. Both live in the trainable state (``fisher.*``, ``anchor.*``), so the
    next task's job - a separate process - continues from them. Mixed into a method of either family
    (``self.cfg.lambda_ewc``); the protected parameters are everything it trains.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        params = self.ewc_parameters()
        self.fisher = TensorStore(params)
        self.anchor_params = TensorStore(params)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # functional_call needs a forward; the model's output is the test-time prediction
        return self.predict(x)

    def ewc_parameters(self) -> dict[str, torch.Tensor]:
        """The protected parameters: everything the optimizer trains (prompt + head, or the whole network)."""
        return {n: p for n, p in self.named_parameters() if p.requires_grad}

    def extra_terms(self, x: torch.Tensor, q: torch.Tensor | None, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.task == 0 or self.cfg.lambda_ewc == 0:
            return {}
        params = self.ewc_parameters()
        fisher = {n: self.fisher.get(n) for n in params}
        anchor = {n: self.anchor_params.get(n) for n in params}
        return {"ewc": ewc_penalty(params, anchor, fisher, self.cfg.lambda_ewc)}

    def end_task(self, task: int, train_set: Dataset) -> dict[str, Any]:
        info = super().end_task(task, train_set)
        params = self.ewc_parameters()

        def nll(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(functional_call(self, p, (x,), strict=False), y, reduction="sum")

        device = next(iter(params.values())).device
        batches = eval_batches(train_set, self.run.optim.eval_batch_size, device)
        fisher_t = empirical_fisher(nll, params, batches, chunk_size=64)
        with torch.no_grad():
            for n, p in params.items():
                self.fisher.get(n).add_(fisher_t[n])
                self.anchor_params.get(n).copy_(p.detach())
        flat = torch.cat([f.flatten() for f in fisher_t.values()])
        total = torch.cat([self.fisher.get(n).flatten() for n in params])
        info["ewc"] = {"task_fisher_mean": float(flat.mean()), "task_fisher_max": float(flat.max()),
                       "cumulative_fisher_mean": float(total.mean())}
        return info


class EWC(EwcMixin, Finetune):
    """EWC on the shared prompt + head."""

    CONFIG = EwcConfig
    SECTION = "methods.ewc"
