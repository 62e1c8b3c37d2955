"""The ``network`` family: a whole network (not a frozen ViT) built by name and trained end to end.

``net_finetune`` (accepts ``+intact``), ``net_ewc`` and ``net_lwf`` train an MLP or a small CNN with
BatchNorm (``methods.<name>.model``: :data:`~intact.experiments.nets.NETWORKS`) on the benchmark's images.
With ``+intact`` every Linear / Conv2d / BatchNorm layer is protected against its own input's hypercube
(a conv input's box per (channel, position)); L_Feat acts on the input of ``feature`` (e.g. ``fc1``: the
first hidden layer's output, as in the paper's MLP experiment), the teacher being the previous task's
network. What is saved per task is the network's state (parameters and BatchNorm statistics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from intact.config import RunConfig, build_dataclass
from intact.experiments.nets import build_network
from intact.methods.protected import ProtectedMethod
from intact.methods.ewc import EwcMixin
from intact.methods.lwf import LwfMixin
from intact.regularizers.interval import AFFINE
from intact.regularizers.regularizer import IntactRegularizer


@dataclass(frozen=True)
class NetworkConfig:
    """``methods.net_finetune`` in config.yaml (values there; these defaults only mirror them)."""

    model: str = "mlp"
    widths: tuple[int, ...] = (128, 64)
    channels: int = 1
    feature: str | None = "fc1"
    protect: tuple[str, ...] | None = None   #: the protected layers by name; None: every Linear / Conv2d / BatchNorm


class NetworkFinetune(ProtectedMethod):
    """A network trained on each task in turn with cross-entropy (+ InTAct's terms with ``+intact``)."""

    CONFIG: ClassVar[type] = NetworkConfig
    SECTION: ClassVar[str] = "methods.net_finetune"

    def __init__(self, run: RunConfig, backbone: nn.Module | None, num_classes: int, num_tasks: int):
        super().__init__(run, None, num_classes, num_tasks)
        self.cfg = build_dataclass(self.CONFIG, run.settings, self.SECTION)
        size = run.benchmark.image_size
        self.model = build_network(self.cfg.model, (self.cfg.channels, size, size), self.cfg.widths, num_classes)
        layers = [n for n, m in self.model.named_modules() if isinstance(m, AFFINE)]
        if self.cfg.protect is not None:
            unknown = sorted(set(self.cfg.protect) - set(layers))
            if unknown:
                raise ValueError(f"{self.SECTION}.protect names {unknown}: expected some of {layers}")
            layers = [n for n in layers if n in self.cfg.protect]
        if self.cfg.feature is not None and self.cfg.feature not in layers:
            raise ValueError(f"{self.SECTION}.feature = {self.cfg.feature!r}: expected one of {layers}")
        self.reg = IntactRegularizer(run.intact, self.model, layers, feature=self.cfg.feature)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def begin_task(self, task: int, train_set: Dataset) -> None:
        super().begin_task(task, train_set)
        self.reg.begin_task(task)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logits = self.model(x)
        total = ce = F.cross_entropy(logits, y)
        terms: dict[str, torch.Tensor] = {"ce": ce}
        for name, value in self.extra_terms(x, None, logits).items():
            terms[name] = value
            total = total + value
        total = self.add_penalty(total, terms, teacher=lambda teacher: self.reg.teacher_feature(x))
        terms["acc"] = (logits.argmax(1) == y).float().mean()
        return total, {k: v.detach() for k, v in terms.items()}

    def extra_terms(self, x: torch.Tensor, q: Any, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}

    # LwF's view of the family: what its snapshot holds and how it computes logits
    def lwf_modules(self) -> dict[str, nn.Module]:
        return {"model": self.model}

    def logits_with(self, modules: dict[str, nn.Module], x: torch.Tensor, q: Any) -> torch.Tensor:
        return modules["model"](x)

    def param_groups(self) -> list[dict[str, Any]]:
        return [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": self.run.optim.lr_head, "name": "network"}]


@dataclass(frozen=True)
class NetworkEwcConfig(NetworkConfig):
    lambda_ewc: float = 100.0


@dataclass(frozen=True)
class NetworkLwfConfig(NetworkConfig):
    lambda_lwf: float = 1.0
    temperature: float = 2.0


class NetworkEWC(EwcMixin, NetworkFinetune):
    """EWC (online, Fishers summed) on the whole network."""

    CONFIG = NetworkEwcConfig
    SECTION = "methods.net_ewc"


class NetworkLwF(LwfMixin, NetworkFinetune):
    """LwF on the whole network (distillation of the previous task's logits)."""

    CONFIG = NetworkLwfConfig
    SECTION = "methods.net_lwf"
