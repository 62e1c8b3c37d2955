"""Prefix tuning inside timm's attention: learnable keys/values concatenated before attention.

Implements the paper's Preliminaries (Eq. prefix): ``K' = [P_K ; h W_K]``, ``V' = [P_V ; h W_V]``
with the frozen ``W_Q, W_K, W_V`` of a timm :class:`~timm.layers.Attention`, and one fused
``scaled_dot_product_attention`` call. The prefix is per sample, shape ``(B, L_p, D)``, so a prompt
pool can give every image its own prompt. An empty prefix (``L_p = 0``) reproduces timm exactly.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from timm.layers import Attention
from timm.models.vision_transformer import Block

#: layer index -> (prefix keys, prefix values), each (B, L_p, D)
Prefix = dict[int, tuple[torch.Tensor, torch.Tensor]]


def prefix_attention(
    attn: Attention, x: torch.Tensor, prefix_k: torch.Tensor | None = None, prefix_v: torch.Tensor | None = None
) -> torch.Tensor:
    """timm ``Attention.forward`` with per-sample prefix keys/values prepended (post-projection)."""
    B, N, _ = x.shape
    H, hd = attn.num_heads, attn.head_dim
    gate = attn.gate(x).sigmoid() if getattr(attn, "gate", None) is not None else None
    q, k, v = attn.qkv(x).reshape(B, N, 3, H, hd).permute(2, 0, 3, 1, 4).unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    if prefix_k is not None and prefix_k.shape[1] > 0:
        pk = prefix_k.reshape(B, -1, H, hd).transpose(1, 2).to(k.dtype)
        pv = prefix_v.reshape(B, -1, H, hd).transpose(1, 2).to(v.dtype)
        k, v = torch.cat((pk, k), dim=2), torch.cat((pv, v), dim=2)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=attn.attn_drop.p if attn.training else 0.0)
    out = attn.norm(out.transpose(1, 2).reshape(B, N, attn.attn_dim))
    if gate is not None:
        out = out * gate
    return attn.proj_drop(attn.proj(out))


def block_with_prefix(block: Block, x: torch.Tensor, prefix: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """A pre-norm timm ``Block`` whose attention sees ``prefix`` (None: the block unchanged)."""
    if prefix is None:
        return block(x)
    x = x + block.drop_path1(block.ls1(prefix_attention(block.attn, block.norm1(x), *prefix)))
    return x + block.drop_path2(block.ls2(block.mlp(block.norm2(x))))


def check_prefixable(blocks: torch.nn.Sequential) -> None:
    """Prefix tuning is defined for pre-norm blocks with standard attention; refuse anything else."""
    for i, blk in enumerate(blocks):
        if type(blk) is not Block or type(blk.attn) is not Attention:
            raise TypeError(
                f"block {i} is {type(blk).__name__} with {type(getattr(blk, 'attn', None)).__name__}; "
                "prefix tuning supports timm VisionTransformer Block + Attention"
            )
