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
  It is a penalty (:class:`~intact.methods.shared.base.Penalty`) composed before InTAct's, so the loss is
  CE + the pool's key loss + ``ka_aux`` + InTAct's terms.

Expert blocks: the code's default is 2-11 (``--e_s 2 --e_e 11``, which no script overrides); the paper's
parameter count implies 2-4 (``ka_prompt@methods.ka_prompt.expert_last=4``). Both are declared in
configs/paper/imagenet_r.yaml. Scripts: tau 0.01; aux_weight 0.1 (DomainNet, ImageNet-R) or 1.0
(ImageNet-C, ImageNet-Mix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from intact.methods.c_prompt import CPromptSettings, check
from intact.methods.c_prompt import METHOD as C_PROMPT
from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class KAPromptSettings(CPromptSettings):
    """``methods.ka_prompt``: C-Prompt's settings (two defaults changed) + its own three."""

    query: str = setting("patch_mean", "the query: patch_mean (--query_pos -1, every script) | token1 | cls",
                         enum=["token1", "cls", "patch_mean"])
    gamma_eps: float = setting(1e-5, "added to mean(d) in the EMA's gamma (C-Prompt: 0; KA-Prompt: 1e-5)", minimum=0)
    greedy_init: bool = setting(True, "fill each new slice from the old slots that cover its queries best")
    tau: float = setting(0.01, "temperature of the old prompts' fusion weights", exclusiveMinimum=0)
    aux_weight: float = setting(0.1, "weight of the previous model's fused-prompt CE (the scripts: 0.1 or 1.0)", minimum=0)


def _aux_penalty(Penalty: type) -> type:
    """The auxiliary CE through the previous model, as a penalty (its term ``ka_aux``)."""
    import torch.nn.functional as F

    class KaAux(Penalty):
        def terms(self, method: Any, batch: Any) -> dict[str, Any]:
            if not method.old or method.cfg.aux_weight <= 0:
                return {}
            old = method.old_logits(batch.x, batch.q, method.pool.last_selection)
            return {"ka_aux": method.cfg.aux_weight * F.cross_entropy(old, batch.y)}

    return KaAux


def _old_model(CPrompt: type) -> type:
    """C-Prompt + the previous model: its snapshot at the start of a task and its fused-prompt logits."""
    import torch
    import torch.nn.functional as F

    from intact.regularizers.regularizer import frozen_copy

    class KAPromptOld(CPrompt):
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

        def old_trunk(self, x: torch.Tensor) -> torch.Tensor:
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
            h = self.cached["old_trunk"] if "old_trunk" in self.cached else self.old_trunk(x)
            return self.old["head"](self.backbone.cls_token(self.backbone.blocks_from(h, self.to_prefix(raw), end)))

        def feature_fns(self) -> dict[str, Any]:
            fns = super().feature_fns()
            if self.old and self.cfg.aux_weight > 0:
                fns["old_trunk"] = lambda x, q: self.old_trunk(x)
            return fns

    return KAPromptOld


def implementation() -> type:
    """The method itself (imports torch: only a job calls this)."""
    import torch
    import torch.nn.functional as F

    from intact.data.loader import eval_batches
    from intact.methods.shared.base import Penalty
    from intact.models.c_prompt import greedy_slots
    from intact.seeding import task_generator

    KaAux = _aux_penalty(Penalty)

    class KAPrompt(_old_model(C_PROMPT.load())):
        """KA-Prompt: C-Prompt + greedy slice initialisation + the previous model's fused-prompt loss."""

        def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
            super().__init__(run, settings, backbone, num_classes, num_tasks)
            # the previous model, held outside the module tree (never saved, never switched to training)
            self.old: dict[str, Any] = {}
            self.greedy: list[tuple[int, int]] = []
            self.penalties.insert(0, KaAux())   # its term before InTAct's

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

        def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
            out = super().end_task(task, train_set)
            if self.greedy:
                out["greedy_init"] = [list(p) for p in self.greedy]
            return out

    return KAPrompt


METHOD = Method("ka_prompt", KAPromptSettings, implementation,
                "KA-Prompt (ICML 2025) on C-Prompt: greedy slice initialisation + the previous model's fused-prompt "
                "loss, as its code runs it", accepts_intact=True, layer_keys=("general_layers",), check=check,
                optimizer="adamw")
