"""Learning without Forgetting (Li & Hoiem, TPAMI 2017): distillation of the previous model's outputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def distillation_loss(logits: torch.Tensor, old_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``T^2 * KL(softmax(old / T) || softmax(new / T))``, averaged over the batch.

    KL rather than LwF's soft cross-entropy: the two differ by the (constant) entropy of the old
    outputs, so the gradients agree, but KL is exactly zero when the model has not changed. The ``T^2``
    keeps the gradient scale independent of the temperature (Hinton et al., 2015).
    """
    if temperature <= 0:
        raise ValueError(f"distillation temperature = {temperature}: expected > 0")
    log_p = F.log_softmax(logits / temperature, dim=1)
    log_q = F.log_softmax(old_logits.detach() / temperature, dim=1)
    return F.kl_div(log_p, log_q, log_target=True, reduction="batchmean") * temperature**2
