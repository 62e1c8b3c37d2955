"""CPrompt's parts (Gao et al., CVPR 2024, "Consistent Prompting for Rehearsal-Free Continual Learning"), as
the official code (Zhanxin-Gao/CPrompt, ``models/cprompt.py``, ``network/cprompt_net.py``) computes them.

* :func:`ccl_loss`: classifier consistency learning - every earlier domain's (frozen) classifier reads the
  current domain's features; its softmax is pushed towards its own softmax at temperature 1 where the
  current classifier is more confident by ``margin``, and towards the flatter one at ``tau`` elsewhere.
* :func:`key_logits`: the cosine of the query with every key (one key per (domain, class)), earlier
  domains' keys detached - the prompt-key matching trained with CE on the (domain, class) index.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ccl_loss(old_logits: torch.Tensor, current_logits: torch.Tensor, margin: float, tau: float) -> torch.Tensor:
    """``-sum softmax(old / T).detach() * log softmax(old)``, averaged over the batch; ``T`` = 1 where the
    current classifier's top logit exceeds the old one's by more than ``margin``, else ``tau``."""
    confident = current_logits.max(dim=1).values > old_logits.max(dim=1).values + margin
    T = torch.where(confident, 1.0, tau).to(old_logits.dtype).unsqueeze(1)
    ground = F.softmax(old_logits / T, dim=1).detach()
    return -(ground * F.log_softmax(old_logits, dim=1)).sum(dim=1).mean()


def key_logits(query: torch.Tensor, keys: torch.Tensor, seen: int, current: int | None) -> torch.Tensor:
    """Cosines (B, seen) of ``query`` with the first ``seen`` keys; with ``current`` (training), the keys
    before row ``current`` are detached (earlier domains' keys stay), as the code's ``K[:s].detach()``."""
    K = keys[:seen]
    if current is not None and current > 0:
        K = torch.cat((K[:current].detach(), K[current:]))
    return F.normalize(query.float(), dim=1) @ F.normalize(K.float(), dim=1).T
