"""Small timm ViTs for the embedded 32x32 grey-scale benchmark and the rehearsal, registered in timm's model
registry.

After ``import intact.models.vit_digits``, ``timm.create_model("vit_digits_p8")`` works like any
timm name; the pipeline pretrains these on the benchmark's clean split instead of downloading.
"""

from __future__ import annotations

from typing import Any

from timm.models import register_model
from timm.models.vision_transformer import VisionTransformer

from intact.models import DIGITS_VIT, REHEARSAL_VIT


def _vit_digits(patch_size: int, **kwargs: Any) -> VisionTransformer:
    args: dict[str, Any] = dict(DIGITS_VIT, patch_size=patch_size)  # the numbers validation reads (models/__init__.py)
    # timm's factory passes bookkeeping kwargs meant for build_model_with_cfg; they are not model args
    for key in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):
        kwargs.pop(key, None)
    args.update(kwargs)
    return VisionTransformer(**args)


@register_model
def vit_digits_p8(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """ViT with 8x8 patches (16 patches + [CLS]), width 64, depth 4, 4 heads: ~140k parameters."""
    return _vit_digits(8, **kwargs)


@register_model
def vit_digits_p4(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """ViT with 4x4 patches (64 patches + [CLS]), width 64, depth 4, 4 heads."""
    return _vit_digits(4, **kwargs)


@register_model
def vit_rgb_p8(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """RGB ViT with 8x8 patches at 32 px, width 64, depth 4: the image benchmarks at ``image_size: 32``
    on a laptop or in tests (the paper's runs use ViT-B/16 at 224)."""
    return _vit_digits(8, **{"in_chans": 3, **kwargs})


@register_model
def vit_rehearsal_p16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """RGB ViT with ViT-B/16's depth (12 blocks) and patch (16 px) at 32 px and width 32: the stand-in of a paper
    backbone in a rehearsal (intact.rehearsal), on which every method builds its prompts in seconds."""
    for key in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):
        kwargs.pop(key, None)
    return VisionTransformer(**{**REHEARSAL_VIT, **kwargs})
