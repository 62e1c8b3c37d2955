"""One prefix prompt shared by every image and task: the trainable set of the non-prompt baselines.

``finetune``, ``ewc``, ``lwf`` and ``joint`` train the same thing - one learnable prefix per prompted
layer (no pool, no selection) plus the shared head - so that they differ from the prompt methods
only in how they fight forgetting, not in capacity or in where the backbone is steered.

Also home of two conventions every prompt module here follows:

* a prompt of length ``L`` is split into prefix **keys = its first L/2 rows, values = its last L/2 rows**
  (as CODA-Prompt, :mod:`intact.methods.impl.coda_p`, and the reference code), so ``L`` must be even;
* prompts and keys are initialised ``U(0, 1)`` from a task-owned generator (the reference code's
  ``nn.init.uniform_``), so a run is a pure function of its seed.
"""

from __future__ import annotations

import torch
from torch import nn

from intact.models.prefix import Prefix


def uniform_(t: torch.Tensor, generator: torch.Generator) -> None:
    """Fill ``t`` in place with ``U(0, 1)`` drawn from ``generator`` (CPU draws: device-independent)."""
    with torch.no_grad():
        t.copy_(torch.rand(t.shape, generator=generator, dtype=t.dtype))


def check_length(length: int, what: str) -> None:
    """A prompt is split in half into prefix keys and values: its length must be even and positive."""
    if length < 2 or length % 2:
        raise ValueError(f"{what} = {length}: expected an even length >= 2 (first half keys, second half values)")


def split_prompt(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts ``(B, [k,] L, D)`` -> prefix keys and values ``(B, k * L/2, D)``, per prompt first half / second half.

    With ``k`` selected prompts, each prompt contributes its own first half to the keys and its own
    second half to the values (then the ``k`` halves are concatenated), not "first k/2 prompts = keys".
    """
    if p.dim() == 3:
        p = p.unsqueeze(1)
    B, _, L, D = p.shape
    half = L // 2
    return p[:, :, :half].reshape(B, -1, D), p[:, :, half:].reshape(B, -1, D)


class SharedPrompt(nn.Module):
    """A single prefix prompt per layer, the same for every input (``forward`` ignores the query's content)."""

    def __init__(self, embed_dim: int, length: int, layers: tuple[int, ...]):
        super().__init__()
        check_length(length, "prompt length")
        self.layers = tuple(layers)
        self.prompts = nn.ParameterDict({str(l): nn.Parameter(torch.zeros(length, embed_dim)) for l in self.layers})
        # Initialise once, whenever the prompt has not been: a method that continues from the previous
        # task's state loads ``initialized = 1`` with it; one that starts fresh (joint) re-initialises.
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.long))

    def begin_task(self, task: int, generator: torch.Generator) -> None:
        if int(self.initialized) == 0:
            for p in self.prompts.values():
                uniform_(p, generator)
            self.initialized.fill_(1)

    def forward(self, query: torch.Tensor) -> tuple[Prefix, torch.Tensor]:
        B = query.shape[0]
        prefix: Prefix = {l: split_prompt(self.prompts[str(l)].expand(B, -1, -1)) for l in self.layers}
        return prefix, query.new_zeros(())
