"""The ``network`` family: a whole network (not a frozen ViT) built by name and trained end to end.

``net_finetune`` (accepts ``+intact``), ``net_ewc`` and ``net_lwf`` train an MLP or a small CNN with
BatchNorm (``methods.<name>.model``: :func:`~intact.models.networks.build_network`) on the benchmark's
images. With ``+intact`` every Linear / Conv2d / BatchNorm layer is protected against its own input's
hypercube (a conv input's box per (channel, position)); L_Feat acts on the input of ``feature`` (e.g.
``fc1``: the first hidden layer's output, as in the paper's MLP experiment), the teacher being the previous
task's network. What is saved per task is the network's state (parameters and BatchNorm statistics).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from intact.methods.net_finetune import watched_layers
from intact.methods.shared.base import Batch, ContinualMethod
from intact.methods.shared.penalties import watch_layers
from intact.models.networks import build_network
from intact.settings import RunConfig


class NetworkMethod(ContinualMethod):
    """A network trained on each task in turn with cross-entropy (+ InTAct's terms with ``+intact``);
    ``settings``: :class:`intact.methods.net_finetune.NetworkSettings` or a subclass."""

    def __init__(self, run: RunConfig, settings: Any, backbone: nn.Module | None, num_classes: int, num_tasks: int):
        super().__init__(run, settings)
        size = run.benchmark.image_size
        self.model = build_network(settings.model, (settings.channels, size, size), settings.widths, num_classes)
        # feature and protect name layers of the network: the declaration's check (net_finetune.check)
        self.intact = watch_layers(run.intact, self.model, watched_layers(settings), feature=settings.feature)
        self.penalties.append(self.intact)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return self.model(x), None, None

    # LwF's view of the family (LwfPenalty): what its snapshot holds and how it computes logits
    def snapshot_modules(self) -> dict[str, nn.Module]:
        return {"model": self.model}

    def logits_with(self, modules: dict[str, nn.Module], batch: Batch) -> torch.Tensor:
        return modules["model"](batch.x)

    def param_groups(self) -> list[dict[str, Any]]:
        return [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": self.cfg.lr,
                 "name": "network"}]
