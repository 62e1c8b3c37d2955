"""KA-Prompt (ICML 2025), on top of C-Prompt, as its code (zhoujiahuan1991/ICML2025-KA-Prompt,
``models/kaprompt_vit.py``, ``scripts/*.sh``) runs it.

What it adds to :mod:`intact.methods.c_prompt`:

* the query is the mean of the patch tokens (``--query_pos -1`` in every script);
* **greedy initialisation**: at task ``t > 0`` the new slice is filled from the old slots whose keys cover
  the new task's queries best (:func:`intact.models.c_prompt.greedy_slots` on ``(cos + 1) / 2``); a slot
  with nothing left to cover is the mean of two picked slots drawn from the run's seed;
* the **auxiliary loss** through the previous model (a frozen copy of the pool and of the EMA head as they
  were when the task began): its expert prompts are the current selection's prompts (weight 1) fused with
  the previous model's top-N old prompts, each weighted ``exp(min(0, cos_old - min cos_new) / tau)``;
  ``aux_weight`` * CE of the previous model's logits on the labels trains the current prompts and keys.

Expert blocks: the code's default is 2-11 (``--e_s 2 --e_e 11``, which no script overrides); the paper's
parameter count implies 2-4 (``ka_prompt@methods.ka_prompt.expert_last=4``). Both are declared in
configs/paper/imagenet_r.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from intact.data.loader import eval_batches
from intact.methods.c_prompt import CPrompt, CPromptConfig
from intact.models.c_prompt import greedy_slots
from intact.regularizers.regularizer import frozen_copy
from intact.seeding import task_generator


@dataclass(frozen=True)
class KAPromptConfig(CPromptConfig):
    """``methods.ka_prompt`` in config.yaml (defaults mirror it). Scripts: tau 0.01; aux_weight 0.1
    (DomainNet, ImageNet-R) or 1.0 (ImageNet-C, ImageNet-Mix); configs/paper/*.yaml."""

    query: str = "patch_mean"
    gamma_eps: float = 1e-5
    greedy_init: bool = True
    tau: float = 0.01
    aux_weight: float = 0.1


class KAPrompt(CPrompt):
    """KA-Prompt: C-Prompt + greedy slice initialisation + the previous model's fused-prompt loss."""

    settings_class = KAPromptConfig
    key = "ka_prompt"

    def __init__(self, run, backbone, num_classes: int, num_tasks: int):
        super().__init__(run, backbone, num_classes, num_tasks)
        # the previous model, held outside the module tree (never saved, never switched to training)
        self.old: dict[str, Any] = {}
        self._labels: torch.Tensor | None = None
        self.greedy: list[tuple[int, int]] = []

    def begin_task(self, task: int, train_set: Dataset) -> None:
        if task > 0:
            # before anything moves: the pool and the evaluated head as they were after the previous task
            head = frozen_copy(self.head)
            if self.ema is not None and int(self.ema.registered):
                head.load_state_dict(self.ema.shadow())
            self.old = {"pool": frozen_copy(self.pool), "head": head}
        super().begin_task(task, train_set)
        self.greedy = []
        if task > 0 and self.cfg.greedy_init:
            self.greedy_init(task, train_set)

    @torch.no_grad()
    def greedy_init(self, task: int, train_set: Dataset) -> None:
        """Fill the slice of ``task`` from the old slots with the greatest coverage of its training queries."""
        was_training = self.training
        self.eval()
        device = self.pool.keys.device
        q = torch.cat([self.query(x) for x, _ in eval_batches(train_set, self.run.optim.eval_batch_size, device)])
        self.train(was_training)
        s, f = self.pool.slice(task)
        sim = (F.normalize(self.pool.keys[:s], dim=1) @ F.normalize(q.float(), dim=1).T + 1) / 2
        slots = greedy_slots(sim, self.pool.per_task, task_generator(self.run.seed, task, "greedy_init"),
                             always_argmax=self.pool.keys.shape[0] < 5)
        for new, (i, j) in zip(range(s, f), slots):
            self.pool.keys[new] = (self.pool.keys[i] + self.pool.keys[j]) / 2
            for p in self.pool.prompts.values():
                p[new] = (p[i] + p[j]) / 2
        self.greedy = slots

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        self._labels = y  # extra_terms needs them for the auxiliary CE
        try:
            return super().loss(x, y)
        finally:
            self._labels = None

    def extra_terms(self, x: torch.Tensor, q: torch.Tensor, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        if not self.old or self.cfg.aux_weight <= 0 or self._labels is None:
            return {}
        return {"ka_aux": self.cfg.aux_weight * F.cross_entropy(self.old_logits(x, q, self.pool.last_selection), self._labels)}

    def old_logits(self, x: torch.Tensor, q: torch.Tensor, new_idx: torch.Tensor) -> torch.Tensor:
        """The previous model's logits with its expert prompts fused from the current selection ``new_idx``
        (weight 1, with gradients) and its own top-N old slots (weights from the key similarities)."""
        old = self.old["pool"]
        s = self.pool.slice()[0]
        qn = F.normalize(q, dim=1)
        val, old_idx = (qn @ F.normalize(old.keys[:s], dim=1).T).topk(self.pool.top_n, dim=1)
        new_cos = (F.normalize(self.pool.keys[new_idx], dim=2) @ qn.unsqueeze(-1)).squeeze(-1)     # (B, N)
        w_old = torch.exp((val - new_cos.min(1, keepdim=True).values).clamp(max=0) / self.cfg.tau)
        w = torch.cat((torch.ones_like(w_old), w_old), dim=1)[:, :, None, None]                    # (B, 2N, 1, 1)
        B = q.shape[0]
        raw = {l: old.general[str(l)].expand(B, -1, -1) for l in old.general_layers}
        for l in old.expert_layers:
            both = torch.cat((self.pool.prompts[str(l)][new_idx], old.prompts[str(l)][old_idx]), dim=1)
            raw[l] = (both * w).sum(1) / w.sum(1)
        return self.old["head"](self.backbone(x, self.to_prefix(raw)))

    def end_task(self, task: int, train_set: Dataset) -> dict[str, Any]:
        out = super().end_task(task, train_set)
        if self.greedy:
            out["greedy_init"] = [list(p) for p in self.greedy]
        return out
