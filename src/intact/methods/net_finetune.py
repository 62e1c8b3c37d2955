"""Sequential fine-tuning of a whole network (an MLP or a small CNN with BatchNorm, no frozen backbone):
the network family (:mod:`intact.methods.shared.network`), with ``+intact`` on every layer."""

from __future__ import annotations

from dataclasses import dataclass

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


METHOD = Method("net_finetune", NetworkSettings, "intact.methods.shared.network:NetworkMethod",
                "sequential fine-tuning of a whole network", accepts_intact=True, uses_backbone=False)
