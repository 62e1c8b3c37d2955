"""Small networks built by name: an MLP and a CNN with BatchNorm (named layers: ``fc0``, ``conv0``, ``bn0``, ...)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

from torch import nn


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, flatten: bool = False) -> nn.Sequential:
    """``[Flatten] -> fc0 -> act0 -> ... -> fcK``: ReLU between Linear layers."""
    layers: list[tuple[str, nn.Module]] = [("flat", nn.Flatten())] if flatten else []
    dims = [in_dim, *hidden, out_dim]
    for i in range(len(dims) - 1):
        layers.append((f"fc{i}", nn.Linear(dims[i], dims[i + 1])))
        if i < len(dims) - 2:
            layers.append((f"act{i}", nn.ReLU()))
    return nn.Sequential(OrderedDict(layers))


def cnn_bn(in_shape: tuple[int, int, int], channels: tuple[int, ...], out_dim: int) -> nn.Sequential:
    """``conv_i (3x3, stride 2) -> bn_i -> act_i`` per entry of ``channels``, then Flatten -> fc0."""
    c, h, w = in_shape
    layers: list[tuple[str, nn.Module]] = []
    for i, ch in enumerate(channels):
        layers += [(f"conv{i}", nn.Conv2d(c, ch, 3, stride=2, padding=1)), (f"bn{i}", nn.BatchNorm2d(ch)),
                   (f"act{i}", nn.ReLU())]
        c, h, w = ch, (h + 1) // 2, (w + 1) // 2
    layers += [("flat", nn.Flatten()), ("fc0", nn.Linear(c * h * w, out_dim))]
    return nn.Sequential(OrderedDict(layers))


#: name -> builder(in_shape, hidden / channels, num_classes)
NETWORKS: dict[str, Callable[..., nn.Sequential]] = {
    "mlp": lambda in_shape, widths, out: mlp(math.prod(in_shape), widths, out, flatten=True),
    "cnn_bn": cnn_bn,
}


def build_network(name: str, in_shape: tuple[int, ...], widths: tuple[int, ...], num_classes: int) -> nn.Sequential:
    """The network ``name`` (:data:`NETWORKS`) for inputs of ``in_shape`` (without the batch dimension)."""
    if name not in NETWORKS:
        raise ValueError(f"network {name!r}: expected one of {', '.join(NETWORKS)}")
    return NETWORKS[name](tuple(in_shape), tuple(widths), num_classes)
