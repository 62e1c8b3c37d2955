"""Backbones, prompt pools, heads and networks (they import torch), and - here, torch-free - the numbers of
our own digits ViTs: validation reads them (:mod:`intact.models.arch`) and :mod:`intact.models.vit_digits`
builds the models from them."""

from __future__ import annotations

from typing import Any

#: the embedded benchmark's ViT (shared by vit_digits_p8 / vit_digits_p4, which differ in patch size)
DIGITS_VIT: dict[str, Any] = dict(img_size=32, in_chans=1, num_classes=10, embed_dim=64, depth=4, num_heads=4,
                                  mlp_ratio=2.0, qkv_bias=True)
#: the rehearsal's stand-in for a 12-block ViT with 16-px patches (ViT-B/16): the same depth and patch, so every
#: method's prompt layers exist, at 32 px and width 32 (intact.rehearsal)
REHEARSAL_VIT: dict[str, Any] = dict(img_size=32, in_chans=3, num_classes=0, embed_dim=32, depth=12, num_heads=2,
                                     mlp_ratio=2.0, qkv_bias=True, patch_size=16)
OURS: dict[str, dict[str, Any]] = {"vit_digits_p8": {**DIGITS_VIT, "patch_size": 8},
                                   "vit_digits_p4": {**DIGITS_VIT, "patch_size": 4},
                                   "vit_rehearsal_p16": REHEARSAL_VIT}
