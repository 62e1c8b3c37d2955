"""Sequential fine-tuning of a whole network (an MLP or a small CNN with BatchNorm, no frozen backbone):
the network family (:mod:`intact.methods.shared.network`), with ``+intact`` on every layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator, Sequence

from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class NetworkSettings:
    """``methods.net_finetune``: the network, its input channels and InTAct's L_Feat layer."""

    model: str = setting("mlp", "mlp | cnn_bn (conv 3x3 stride 2 -> BatchNorm -> ReLU per width, then fc0)",
                         enum=["mlp", "cnn_bn"])
    widths: tuple[int, ...] = setting((128, 64), "hidden widths (mlp) or channels (cnn_bn)", minItems=1,
                                      items={"minimum": 1})
    channels: int = setting(1, "image channels of the benchmark", minimum=1)
    feature: str | None = setting("fc1", "L_Feat on this layer's input (mlp: the first hidden layer; cnn_bn: e.g. "
                                  "conv1)")
    protect: tuple[str, ...] | None = setting(None, "protected layers (fc0, conv0, bn0, ...); null: every Linear / "
                                                    "Conv2d / BatchNorm")
    #: added after runs were recorded (they trained at optim.lr_head, whose default is this value)
    lr: float = setting(1e-2, "learning rate of the whole network (Adam)", later=True, exclusiveMinimum=0)


def layer_names(model: str, widths: Sequence[int]) -> list[str]:
    """The Linear / Conv2d / BatchNorm layers of network ``model`` (:func:`intact.models.networks.build_network`)
    with these widths, in order, known without building it."""
    if model == "mlp":
        return [f"fc{i}" for i in range(len(widths) + 1)]
    return [n for i in range(len(widths)) for n in (f"conv{i}", f"bn{i}")] + ["fc0"]


def watched_layers(s: NetworkSettings) -> list[str]:
    """The layers ``+intact`` protects: ``protect``, in the network's order, or every one of :func:`layer_names`."""
    return [n for n in layer_names(s.model, s.widths) if s.protect is None or n in s.protect]


def check(s: NetworkSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    """The network takes the benchmark's images, and ``feature`` and ``protect`` name its layers (every member of
    the family)."""
    channels = bench.declaration.channels
    if channels is not None and s.channels != channels:
        yield "channels", f"benchmark {bench.name!r} (type {bench.type!r}) has {channels}-channel images"
    layers = layer_names(s.model, s.widths)
    net = f"the {s.model} of widths {list(s.widths)}"
    unknown = sorted(set(s.protect or ()) - set(layers))
    if unknown:
        yield "protect", f"names {unknown}, not layers of {net}: expected some of {layers}"
    watched = watched_layers(s)
    if s.feature is not None and s.feature not in watched:
        yield "feature", f"not a protected layer of {net}: expected one of {watched}"


METHOD = Method("net_finetune", NetworkSettings, "intact.methods.shared.network:NetworkMethod",
                "sequential fine-tuning of a whole network", accepts_intact=True, uses_backbone=False,
                check=check)
