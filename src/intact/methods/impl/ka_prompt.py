"""KA-Prompt (ICML 2025) on C-Prompt (:class:`~intact.methods.impl.compositional_prompt.CompositionalPrompt`):
greedy slice initialisation and the previous model's fused-prompt loss; declared in :mod:`intact.methods.ka_prompt`."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from intact.methods.impl.compositional_prompt import CompositionalPrompt
from intact.methods.shared.base import Batch, ContinualMethod, Penalty, batches
from intact.methods.shared.frozen import frozen_feature
from intact.regularizers.regularizer import frozen_copy
from intact.seeding import task_generator


def greedy_slots(sim: torch.Tensor, count: int, generator: torch.Generator,
                 always_argmax: bool = False) -> list[tuple[int, int]]:
    """KA-Prompt's greedy coverage: ``sim`` (old keys, new images) in [0, 1]; pick ``count`` old keys, each
    time the one whose scores add most above the running per-image maximum of the keys picked so far.
    When no key adds anything, the slot becomes the mean of two keys drawn (with replacement) from those
    picked (``always_argmax``: the code's rule for pools of fewer than 5 slots, which never interpolates).
    Returns pairs ``(i, j)``: the new slot is the mean of old slots i and j (``i == j``: a copy)."""
    picked: list[int] = []
    out: list[tuple[int, int]] = []
    best = None
    for _ in range(count):
        gain = sim.sum(1) if best is None else (sim - best).clamp(min=0).sum(1)
        if always_argmax or not picked or bool((gain != 0).any()):
            i = int(gain.argmax())
            picked.append(i)
            out.append((i, i))
            best = sim[i] if best is None else torch.maximum(best, sim[i])
        else:
            a, b = torch.randint(len(picked), (2,), generator=generator).tolist()
            out.append((picked[a], picked[b]))
    return out


class KaAux(Penalty):
    """The auxiliary CE through the previous model (its term ``ka_aux``)."""

    def terms(self, method: ContinualMethod, batch: Batch) -> dict[str, torch.Tensor]:
        if not method.old or method.cfg.aux_weight <= 0:
            return {}
        old = method.old_logits(batch.x, batch.q, method.pool.last_selection)
        return {"ka_aux": method.cfg.aux_weight * F.cross_entropy(old, batch.y)}


class KAPrompt(CompositionalPrompt):
    """KA-Prompt: C-Prompt + greedy slice initialisation + the previous model's fused-prompt loss."""

    def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
        super().__init__(run, settings, backbone, num_classes, num_tasks)
        # the previous model, held outside the module tree (never saved, never switched to training)
        self.old: dict[str, Any] = {}
        self.greedy: list[tuple[int, int]] = []
        self.penalties.insert(0, KaAux())   # its term before InTAct's

    # ---- the previous model: its snapshot at the start of a task and its fused-prompt logits --------------
    def snapshot_old(self) -> None:
        """The pool and the evaluated head as they were after the previous task (before anything moves)."""
        head = frozen_copy(self.head)
        if self.ema is not None and int(self.ema.registered):
            head.load_state_dict(self.ema.shadow())
        self.old = {"pool": frozen_copy(self.pool), "head": head}

    @property
    def trunk_end(self) -> int:
        """The previous model's first block with expert prompts. They fuse the current selection's
        (trained) prompts, so only the blocks before it are fixed for the task: there the previous
        model reads its own general prompts alone, frozen with it when the task began."""
        return min(self.old["pool"].expert_layers)

    @frozen_feature(when=lambda self: bool(self.old) and self.cfg.aux_weight > 0)
    def old_trunk(self, x: torch.Tensor, q: torch.Tensor | None = None) -> torch.Tensor:
        """The previous model's tokens of ``x`` after blocks ``0..trunk_end-1``: a function of the image
        for the whole task (cached once per task as ``old_trunk``, see :mod:`intact.cache`)."""
        old, end, B = self.old["pool"], self.trunk_end, x.shape[0]
        raw = {l: old.general[str(l)].expand(B, -1, -1) for l in old.general_layers if l < end}
        return self.backbone.blocks_from(self.backbone.tokens(x), self.to_prefix(raw), 0, end)

    def old_logits(self, x: torch.Tensor, q: torch.Tensor, new_idx: torch.Tensor) -> torch.Tensor:
        """The previous model's logits with its expert prompts fused from the current selection ``new_idx``
        (weight 1, with gradients) and its own top-N old slots (weights from the key similarities). Its
        blocks before :attr:`trunk_end` are read from the batch's cache when there is one."""
        old, end = self.old["pool"], self.trunk_end
        s = self.pool.slice()[0]
        qn = F.normalize(q, dim=1)
        val, old_idx = (qn @ F.normalize(old.keys[:s], dim=1).T).topk(self.pool.top_n, dim=1)
        new_cos = (F.normalize(self.pool.keys[new_idx], dim=2) @ qn.unsqueeze(-1)).squeeze(-1)     # (B, N)
        w_old = torch.exp((val - new_cos.min(1, keepdim=True).values).clamp(max=0) / self.cfg.tau)
        w = torch.cat((torch.ones_like(w_old), w_old), dim=1)[:, :, None, None]                    # (B, 2N, 1, 1)
        B = q.shape[0]
        raw = {l: old.general[str(l)].expand(B, -1, -1) for l in old.general_layers if l >= end}
        for l in old.expert_layers:
            both = torch.cat((self.pool.prompts[str(l)][new_idx], old.prompts[str(l)][old_idx]), dim=1)
            raw[l] = (both * w).sum(1) / w.sum(1)
        h = self.old_trunk(x)
        return self.old["head"](self.backbone.cls_token(self.backbone.blocks_from(h, self.to_prefix(raw), end)))

    # ---- the task hooks ------------------------------------------------------------------------------------
    def begin_task(self, task: int, train_set: Any) -> None:
        if task > 0:
            self.snapshot_old()
        super().begin_task(task, train_set)
        self.greedy = []
        if task > 0 and self.cfg.greedy_init:
            self.greedy_init(task, train_set)

    @torch.no_grad()
    def greedy_init(self, task: int, train_set: Any) -> None:
        """Fill the slice of ``task`` from the old slots with the greatest coverage of its training queries."""
        was_training = self.training
        self.eval()
        q = torch.cat([self.query(x) for x, _ in batches(self, train_set)])
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

    def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
        out = super().end_task(task, train_set)
        if self.greedy:
            out["greedy_init"] = [list(p) for p in self.greedy]
        return out
