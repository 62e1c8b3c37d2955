"""S-Prompts' parts (Wang et al., NeurIPS 2022): input prompt tokens, domain centres, nearest-centre choice.

As the official ViT version (``models/sinet.py``, ``methods/sprompt.py``): a domain's prompt tokens are
inserted right after [CLS], after the position embedding (the prompts get none); the domain centres are
k-means centres of the L2-normalised unprompted [CLS] features of the domain's training images; at test
the domain whose nearest centre is closest to an image's normalised feature is chosen. The official
distance is ``sum |f - c|`` (its ``((f - c) ** 2) ** 0.5`` summed: L1); ``distance: l2`` is the paper's
reading (nearest neighbour in the usual, Euclidean sense).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from intact.models.backbone import FrozenViT

DISTANCES = ("l1", "l2")


def forward_with_tokens(backbone: FrozenViT, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The final-LayerNorm [CLS] with ``tokens`` (B, L, D) inserted after [CLS] at the input."""
    h = backbone._tokens(x)
    h = torch.cat((h[:, :1], tokens.to(h.dtype), h[:, 1:]), dim=1)
    return backbone.vit.norm(backbone.vit.blocks(h))[:, 0]


def kmeans_centres(features: torch.Tensor, k: int, seed: int = 0) -> torch.Tensor:
    """k-means centres (k, D) of ``features`` (N, D), as the official ``KMeans(n_clusters=5, random_state=0)``
    (scikit-learn, k-means++ seeding; ``n_init=10``, its default at the time)."""
    from sklearn.cluster import KMeans

    if len(features) < k:
        raise ValueError(f"methods.s_prompts.clusters = {k}: the domain has only {len(features)} training images")
    km = KMeans(n_clusters=k, random_state=seed, n_init=10).fit(features.detach().cpu().double().numpy())
    return torch.from_numpy(np.asarray(km.cluster_centers_)).to(features.dtype)


def choose_domain(features: torch.Tensor, centres: torch.Tensor, distance: str = "l1") -> torch.Tensor:
    """Per image, the domain (index into ``centres`` (T, k, D)) with the nearest centre to its normalised feature."""
    f = F.normalize(features.float(), dim=1)
    c = centres.float()
    diff = f[:, None, None, :] - c[None]                               # (B, T, k, D)
    d = diff.abs().sum(-1) if distance == "l1" else diff.pow(2).sum(-1).sqrt()
    return d.min(dim=2).values.argmin(dim=1)
