"""CODA-Prompt (Smith et al., CVPR 2023): attention-weighted sums of prompt components, prefix tuning at
the first blocks, as the paper's Preliminaries describe it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator

from intact.methods.declare import Method
from intact.settings import setting

LENGTH_DOC = "prompt length per layer (halves: keys, values)"


@dataclass(frozen=True)
class CodaSettings:
    """``methods.coda_p`` (reference code: pool 100 at blocks 0-4 of 12)."""

    pool_size: int = setting(40, "components in all; pool_size / num_tasks new ones per task", minimum=1)
    length: int = setting(8, LENGTH_DOC, minimum=2, multipleOf=2)
    layers: tuple[int, ...] = setting((0, 1, 2), "blocks that get the prefix", items={"minimum": 0})
    ortho_mu: float = setting(0.0, "weight of the components' orthogonality loss", minimum=0)


def check(s: CodaSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    if s.pool_size < bench.num_tasks:
        yield "pool_size", (f"fewer components than the {bench.num_tasks} tasks of benchmark {bench.name!r} "
                            "(pool_size / tasks new ones per task)")


METHOD = Method("coda_p", CodaSettings, "intact.methods.impl.coda_p:CodaPrompt",
                "CODA-Prompt (Smith et al., CVPR 2023)", accepts_intact=True, layer_keys=("layers",), check=check)
