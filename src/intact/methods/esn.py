"""ESN (Wang et al., AAAI 2023, "Isolation and Impartial Aggregation"), as its code (iamwangyabin/ESN,
``networks.py``, ``trainer.py``) runs it, in domain-incremental learning as its CORe50 setting (``--dil``:
one stage per domain, each stage a classifier over all the classes).

Per stage (domain) ``t``: a task token, a class-attention block (ConViT's, ``mlp_ratio`` 0.5) over the
frozen ViT's tokens before its final LayerNorm, and a classifier; trained with CE + ``lambda_energy`` *
(free energy - ``anchor_energy``)^2, which keeps every stage's energy at the same level. A shared prompt of
``length`` tokens goes in after [CLS] at the input. After the stage, the temperature whose energies pick the
stage for the most of its own training images is kept (stage 0: ``first_temperature``). At test every
distinct kept temperature votes for the stage of highest energy ``logsumexp(logits / T)``; the winning
stage's classifier classifies the image.

The prompt: the code means to train it at the first stage only (``freezep=True`` afterwards), but it then
replaces the frozen prompt by a copy of the previous stage's trainable one, so the released code trains
it at every stage and evaluates all stages with the latest prompt (``prompt_training: every_task``, the
default); ``first_task`` is the flag's intent. docs/methods-main-table.md lists every departure.

``esn+intact`` is refused: nothing in a head is shared between domains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator

from intact.methods.declare import Method
from intact.settings import setting

#: the code's "fast mode" candidates (``trainer.py``, ``candidata_temperatures``)
TEMPERATURES = (0.001, 0.01, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass(frozen=True)
class ESNSettings:
    """``methods.esn`` (the code: 100 prompt tokens, mlp_ratio 0.5, anchor -10, beta 1, lamda 0.1)."""

    length: int = setting(10, "shared prompt tokens after [CLS] (the code: 100)", minimum=0)
    prompt_training: str = setting("every_task", "every_task (the released code) or first_task (its freezep flag's "
                                   "intent)", enum=["every_task", "first_task"])
    mlp_ratio: float = setting(0.5, "hidden width / D of each stage's class-attention MLP", exclusiveMinimum=0)
    lambda_energy: float = setting(0.1, "lamda: weight of (free energy - anchor_energy)^2", minimum=0)
    anchor_energy: float = setting(-10.0, "the energy every stage is pulled to")
    energy_beta: float = setting(1.0, "beta of the free energy -logsumexp(-beta * logits) / beta", exclusiveMinimum=0)
    temperatures: tuple[float, ...] = setting(TEMPERATURES, "candidate temperatures of the stage vote", minItems=1,
                                              items={"exclusiveMinimum": 0})
    first_temperature: float = setting(0.001, "stage 0's temperature (no earlier stage to separate from)",
                                       exclusiveMinimum=0)


def check(s: ESNSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    if len(set(s.temperatures)) != len(s.temperatures):
        yield "temperatures", "lists a temperature twice"
    hidden = int(backbone.embed_dim * s.mlp_ratio)  # as intact.models.esn.ClassAttentionBlock sizes its MLP
    if hidden < 1:
        yield "mlp_ratio", f"gives the class-attention MLP {hidden} hidden units at the backbone's width " \
                           f"{backbone.embed_dim}: at least 1"


METHOD = Method("esn", ESNSettings, "intact.methods.impl.esn:ESN",
                "ESN (Wang et al., AAAI 2023): energy-aligned stages on a prompted frozen ViT; the domain by a "
                "temperature vote over energies",
                accepts_intact=False,
                intact_refusal="it shares no head between domains (a class-attention block, task token and classifier "
                               "per domain; the stage is chosen by an energy vote), so InTAct has no shared head to "
                               "protect",
                check=check)
