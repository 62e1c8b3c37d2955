"""DualPrompt (Wang et al., ECCV 2022; the prefix-tuning variant of the CODA-Prompt code): its two prompt groups
on the prompt family; declared in :mod:`intact.methods.dualprompt`.

* **G-prompt**: one prompt per G-layer (reference: length 6 at blocks 0-1), shared by all tasks and
  trained throughout.
* **E-prompts**: one prompt per task per E-layer (reference: length 20 at blocks 2-4), each with one key.
  While task ``t`` trains, every image uses E-prompt ``t`` (the task identity is known in training) and
  the matching loss ``mean_b (1 - cos(q_b, k_t))`` pulls key ``t`` to the task's queries. At test time
  every image uses the E-prompt of its best-matching key (top-1 cosine) among the tasks seen so far:
  keys of later tasks are still untrained draws and are never candidates.

(The appendix equation of the InTAct paper writes the E-prompts in the first layers and the G-prompts in
the later ones; DualPrompt and its reference code put G first - we follow the code: the layer lists are
configuration.) Prompts split into prefix keys / values as everywhere here (first half / second half).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from intact.methods.shared.prompt import PromptMethod
from intact.models.prefix import Prefix
from intact.models.shared_prompt import check_length, split_prompt, uniform_
from intact.models.task_index import TaskIndexed


class DualPromptPool(TaskIndexed):
    """G-prompts + a task-keyed E-prompt pool; ``task`` (a buffer, saved with the state) is the current task."""

    def __init__(self, embed_dim: int, num_tasks: int, g_length: int, g_layers: tuple[int, ...],
                 e_length: int, e_layers: tuple[int, ...], match_weight: float = 1.0):
        super().__init__()
        check_length(g_length, "methods.dualprompt.g_length")
        check_length(e_length, "methods.dualprompt.e_length")
        # g_layers and e_layers are disjoint: the declaration's layer_keys (intact.methods.declare.problems)
        self.g_layers, self.e_layers = tuple(g_layers), tuple(e_layers)
        self.match_weight = match_weight
        self.g_prompts = nn.ParameterDict({str(l): nn.Parameter(torch.zeros(g_length, embed_dim))
                                           for l in self.g_layers})
        self.e_prompts = nn.ParameterDict({str(l): nn.Parameter(torch.zeros(num_tasks, e_length, embed_dim))
                                           for l in self.e_layers})
        self.keys = nn.Parameter(torch.zeros(num_tasks, embed_dim))
        self.register_task()

    def begin_task(self, task: int, generator: torch.Generator) -> None:
        """Make ``task`` current; draw its E-prompt and key (and, at the first task, the G-prompts)."""
        self.set_task(task)
        if task == 0:
            for p in self.g_prompts.values():
                uniform_(p, generator)
        with torch.no_grad():
            uniform_(self.keys[task], generator)
            for p in self.e_prompts.values():
                uniform_(p[task], generator)

    def select(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos (B, t+1), idx (B,))``: similarity to the seen tasks' keys and the E-prompt each image uses."""
        t = self.task_index
        cos = F.normalize(query.detach(), dim=1) @ F.normalize(self.keys[: t + 1], dim=1).T
        if self.training:
            idx = torch.full((query.shape[0],), t, dtype=torch.long, device=query.device)
        else:
            idx = cos.argmax(dim=1)
        return cos, idx

    def forward(self, query: torch.Tensor) -> tuple[Prefix, torch.Tensor]:
        B = query.shape[0]
        cos, idx = self.select(query)
        prefix: Prefix = {l: split_prompt(self.g_prompts[str(l)].expand(B, -1, -1)) for l in self.g_layers}
        for l in self.e_layers:
            prefix[l] = split_prompt(self.e_prompts[str(l)][idx])
        if self.training:
            aux = self.match_weight * (1.0 - cos[:, self.task_index]).mean()
        else:
            aux = query.new_zeros(())
        return prefix, aux


class DualPrompt(PromptMethod):
    """DualPrompt: the G- and E-prompts on a frozen ViT, the shared head."""

    def build_pool(self, embed_dim: int, num_tasks: int) -> DualPromptPool:
        s = self.cfg
        return DualPromptPool(embed_dim, num_tasks, s.g_length, s.g_layers, s.e_length, s.e_layers, s.match_weight)
