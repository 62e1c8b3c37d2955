"""L2P(++) (Wang et al., CVPR 2022): top-k key-prompt selection by cosine(query, key), prefix tuning at
block 0 (the CODA-Prompt code's L2P++)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator

from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class L2PSettings:
    """``methods.l2p`` (reference: pool 30, length 20, top-5, block 0)."""

    pool_size: int = setting(10, "key-prompt pairs in the pool", minimum=1)
    length: int = setting(8, "length of each prompt (halves: keys, values)", minimum=2, multipleOf=2)
    top_k: int = setting(3, "prompts selected per image", minimum=1)
    layers: tuple[int, ...] = setting((0,), "blocks that get the selected prompts (reference: block 0 only)",
                                      minItems=1, items={"minimum": 0})
    match_weight: float = setting(1.0, "weight of the per-sample key-matching loss mean_b sum_selected "
                                  "(1 - cos(q_b, k))", minimum=0)


def check(s: L2PSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    if s.top_k > s.pool_size:
        yield "top_k", f"larger than methods.l2p.pool_size = {s.pool_size}"


METHOD = Method("l2p", L2PSettings, "intact.methods.impl.l2p:L2P",
                "L2P++ (Wang et al., CVPR 2022), prefix tuning", accepts_intact=True, layer_keys=("layers",),
                check=check)
