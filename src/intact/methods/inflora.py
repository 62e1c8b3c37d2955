"""InfLoRA (Liang & Li, CVPR 2024): interference-free low-rank updates of K and V, one shared head.

Per task (official code ``methods/inflora.py``): a pass over the task's training images collects every
block's attention-input covariance; its part outside the earlier tasks' DualGPM subspace gives the new
task's fixed ``A``; ``B`` trains from zero, all tasks' ``B A`` summed; after training a second pass updates
DualGPM with the threshold schedule (:mod:`intact.methods.impl.inflora`). The official configs are
class-incremental (one head per task's classes); in domain-incremental learning every domain shares the
classes, so the natural adaptation is one shared head - which ``inflora+intact`` protects (the teacher for
L_Feat: the previous task's LoRA, as CODA-P's previous pool). Official ImageNet-R: rank 10, lamb 0.98, lame 1.0
(configs/paper/base.yaml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator

from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class InfloraSettings:
    """``methods.inflora``."""

    rank: int = setting(4, "LoRA rank per task and block, on K and V", minimum=1)
    lamb: float = setting(0.95, "DualGPM energy threshold after task 0, rising linearly ...", exclusiveMinimum=0,
                          maximum=1)
    lame: float = setting(1.0, "... towards this one", exclusiveMinimum=0, maximum=1)
    #: ``later``: issue 16's runs were recorded without this key; left out of the hash while at its default
    a_scale: float = setting(1 / math.sqrt(3), "A = a_scale * singular vectors (the official code's 1/sqrt(3))",
                             later=True, exclusiveMinimum=0)


def check(s: InfloraSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    """A task's ``A`` is ``rank`` directions of the blocks' input space: at most the backbone's width."""
    if s.rank > backbone.embed_dim:
        yield "rank", f"above the backbone's width {backbone.embed_dim} (the directions of a block's input)"


METHOD = Method("inflora", InfloraSettings, "intact.methods.impl.inflora:InfLoRA",
                "InfLoRA (Liang & Li, CVPR 2024): rank-r LoRA on K and V of every block per task, A fixed outside the "
                "DualGPM subspace; one shared head", accepts_intact=True, check=check)
