"""ESN's parts (Wang et al., AAAI 2023, "Isolation and Impartial Aggregation"), as the official code
(iamwangyabin/ESN, ``networks.py``, ``models/convit.py``, ``trainer.py``) builds them.

* :func:`prompted_tokens`: the frozen ViT's token sequence *before* its final LayerNorm (the code's
  ``returnbeforepool=True``) with prompt tokens inserted after [CLS]; shared with CPrompt, which inserts a
  second set before a later block.
* :class:`ClassAttentionBlock`: a stage's classifier body, ConViT's ``Block`` with ``ClassAttention``: the
  stage's task token attends to all tokens (norm1 over the whole sequence, the query from the task token
  only), then an MLP of ``mlp_ratio`` * D hidden units; both residual.
* :func:`free_energy`, :func:`choose_temperature`, :func:`vote`: the energy alignment of training, the
  per-stage temperature chosen on the stage's training images, and the temperature vote at test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from intact.models.backbone import FrozenViT
from intact.seeding import init_on_cpu_


def prompted_tokens(backbone: FrozenViT, x: torch.Tensor, inserts: Mapping[int, torch.Tensor]) -> torch.Tensor:
    """The token sequence after the last block, before the final LayerNorm, with ``inserts[l]`` ((B, L, D)
    or (L, D)) inserted before block ``l``, right after [CLS] and the tokens inserted earlier. Tokens
    inserted at the input get no position embedding (they go in after it), as in both official codes."""
    h = backbone.tokens(x)
    after = 1                                            # where the next inserted tokens go: after [CLS] + earlier ones
    for i, blk in enumerate(backbone.vit.blocks):
        if i in inserts:
            p = inserts[i].to(h.dtype)
            p = p.expand(len(h), -1, -1) if p.dim() == 2 else p
            h = torch.cat((h[:, :after], p, h[:, after:]), dim=1)
            after += p.shape[1]
        h = blk(h)
    return h


class ClassAttentionBlock(nn.Module):
    """ConViT's ``Block(attention_type=ClassAttention)`` as ESN's ``tabs``: ``token`` (B, 1, D) attends to
    ``[token, tokens]``; returns the updated token (B, D). LayerNorm eps 1e-5 (``nn.LayerNorm``), exact GELU."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"ESN's class-attention block: {heads} heads do not divide the width {dim}")
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    @torch.no_grad()
    def reset(self, g: torch.Generator) -> None:
        """The code's init: every Linear weight ~ trunc_normal(std 0.02), biases 0, LayerNorms (1, 0)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                init_on_cpu_(m.weight, nn.init.trunc_normal_, g, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, token: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        x = torch.cat((token.expand(len(tokens), -1, -1).to(tokens.dtype), tokens), dim=1)
        B, N, C = x.shape
        h, d = self.heads, C // self.heads
        xx = self.norm1(x)
        q = self.q(xx[:, 0]).reshape(B, h, 1, d) * d ** -0.5
        k = self.k(xx).reshape(B, N, h, d).transpose(1, 2)
        v = self.v(xx).reshape(B, N, h, d).transpose(1, 2)
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)                    # (B, h, 1, N)
        cls = self.proj((attn @ v).transpose(1, 2).reshape(B, C)) + x[:, 0]
        return cls + self.mlp(self.norm2(cls))


def free_energy(logits: torch.Tensor, beta: float) -> torch.Tensor:
    """The code's ``-logsumexp(-beta * logits) / beta`` per image (``networks.py``, ``_calculate_loss``):
    a soft minimum of the logits, which the alignment loss pulls towards the anchor energy."""
    return -torch.logsumexp(-beta * logits, dim=1) / beta


def stage_energies(logits: torch.Tensor, temperatures: Sequence[float]) -> torch.Tensor:
    """``logsumexp(logits / T)`` per temperature, image and stage: (len(T), B, S) from logits (B, S, C)."""
    return torch.stack([torch.logsumexp(logits.float() / t, dim=-1) for t in temperatures])


def choose_temperature(logits: torch.Tensor, stage: int, candidates: Sequence[float]) -> float:
    """The candidate whose energies pick ``stage`` for the most of the stage's own training images
    (logits (N, S, C) of all stages so far); the first such candidate on a tie, as ``np.argmax``."""
    hits = (stage_energies(logits, candidates).argmax(dim=2) == stage).sum(dim=1)        # (len(candidates),)
    return float(candidates[int(hits.argmax())])


def vote(logits: torch.Tensor, temperatures: Sequence[float]) -> torch.Tensor:
    """The stage each image is assigned to: every distinct temperature votes for the stage of highest
    energy, the most votes win, a tie goes to the lowest stage (``torch.mode``'s smallest mode)."""
    choices = stage_energies(logits, sorted(set(temperatures))).argmax(dim=2)              # (T, B)
    counts = F.one_hot(choices, logits.shape[1]).sum(dim=0)                                 # (B, S)
    return counts.argmax(dim=1)


def linear_init_(layer: nn.Linear, g: torch.Generator, bias_zero: bool = False) -> None:
    """``nn.Linear``'s own init (U(+-1/sqrt(fan_in)) for weight and bias) drawn from ``g``; with
    ``bias_zero``, PyCIL's ``SimpleLinear`` (kaiming_uniform(nonlinearity='linear'), bias 0; CPrompt)."""
    with torch.no_grad():
        if bias_zero:
            init_on_cpu_(layer.weight, nn.init.kaiming_uniform_, g, nonlinearity="linear")
            nn.init.zeros_(layer.bias)
            return
        bound = 1 / math.sqrt(layer.in_features)
        init_on_cpu_(layer.weight, nn.init.uniform_, g, -bound, bound)
        init_on_cpu_(layer.bias, nn.init.uniform_, g, -bound, bound)
