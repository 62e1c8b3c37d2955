"""The shared classifier head: Linear, or Linear -> LeakyReLU -> ... -> Linear.

InTAct protects every Linear of the head against the hypercube of *its own input* (captured by the
regularizer's forward hooks; the layer names ``fc0, fc1, ...`` are the hypercubes' names).
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from intact.settings import HeadConfig


class Head(nn.Sequential):
    """A classifier whose Linear layers are named ``fc0, fc1, ...``."""

    def __init__(self, in_dim: int, num_classes: int, cfg: HeadConfig):
        layers: list[tuple[str, nn.Module]] = []
        dims = [in_dim, *cfg.hidden, num_classes]
        for i in range(len(dims) - 1):
            layers.append((f"fc{i}", nn.Linear(dims[i], dims[i + 1])))
            if i < len(dims) - 2:
                layers.append((f"act{i}", nn.LeakyReLU(cfg.negative_slope)))
        super().__init__(OrderedDict(layers))
        self.negative_slope = cfg.negative_slope

    def linears(self) -> list[tuple[str, nn.Linear]]:
        return [(n, m) for n, m in self.named_children() if isinstance(m, nn.Linear)]
