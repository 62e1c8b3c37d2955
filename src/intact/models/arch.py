"""What validation needs to know of a backbone without building its weights: depth, width, heads, input size,
channels.

Our own digits ViTs are described here without importing torch (``vit_digits.py`` builds them from the
same numbers), so validating the default config stays instant; any other timm name is built once on
torch's ``meta`` device (no memory, no weights, no download) and inspected.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from intact.models import OURS


@dataclass(frozen=True)
class Arch:
    """The facts of a backbone that config settings must agree with."""

    depth: int
    img_size: tuple[int, int] | None      #: None: the model accepts any input size
    in_chans: int
    patch_size: tuple[int, int]
    problem: str | None = None            #: why prompts cannot be attached to it (None: they can)
    embed_dim: int = 0                    #: width: the tokens' dimension
    num_heads: int = 0                    #: attention heads per block


@cache
def backbone_arch(model: str) -> Arch:
    """The :class:`Arch` of timm model ``model``; ValueError if timm does not know the name."""
    if model in OURS:
        a = OURS[model]
        return Arch(a["depth"], (a["img_size"],) * 2, a["in_chans"], (a["patch_size"],) * 2,
                    embed_dim=a["embed_dim"], num_heads=a["num_heads"])
    import torch

    from intact.models.backbone import create_vit
    from intact.models.prefix import check_prefixable

    with torch.device("meta"):
        vit = create_vit(model)
    blocks = getattr(vit, "blocks", None)
    pe = getattr(vit, "patch_embed", None)
    if blocks is None or pe is None:
        return Arch(0, None, 0, (0, 0), f"{model!r} is not a ViT (no patch embedding / transformer blocks)")
    try:
        check_prefixable(blocks)
        problem = None
    except TypeError as err:
        problem = str(err)
    dynamic = getattr(pe, "dynamic_img_size", False) or getattr(pe, "img_size", None) is None
    heads = getattr(getattr(blocks[0], "attn", None), "num_heads", 0) if len(blocks) else 0
    return Arch(len(blocks), None if dynamic else tuple(pe.img_size), pe.proj.in_channels, tuple(pe.patch_size),
                problem,
                embed_dim=int(getattr(vit, "embed_dim", 0)), num_heads=int(heads))
