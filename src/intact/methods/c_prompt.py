"""C-Prompt (Liu et al., IJCV 2024), as its code (zhoujiahuan1991/IJCV2024-C-Prompt, ``models/cprompt_vit.py``) runs it.

Per image: the query is output token 1 of the frozen ViT; the top-N keys of the current task's slice
(training) or of the whole pool (test) pick N expert prompts, averaged into one and inserted at the expert
blocks; the general prompts go in at the general blocks; every prompt is projected through the block's
frozen ``qkv`` (:func:`intact.models.c_prompt.qkv_prefix`). Loss: CE + ``key_weight`` * sum of the selected
keys' cosine distances. The optimizer is AdamW (its default weight decay 0.01), fresh at every task. The
head that is *evaluated* is the adaptive EMA of the live head (:class:`~intact.models.c_prompt.AdaptiveEma`).

With ``+intact`` the regularizer watches the live head's Linear layers as for every prompt method here, and
``protect`` says which function its anchors are: ``ema`` (default) - the EMA head that was evaluated after
the previous task; the hypercube pass and the certificate then use the current EMA head, so the bound is
on the head that is tested (an EMA with 0 <= gamma <= 1 of heads that stay within the drift bound of the
anchor stays within it too, for a single Linear); ``live`` - the live head at the end of the previous task,
as for CODA-P. The L_Feat teacher is the previous task's pool (its test-time selection), as for CODA-P.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch import nn
from torch.utils.data import Dataset

from intact.config import build_dataclass
from intact.methods.prompt import PromptMethod
from intact.models.c_prompt import AdaptiveEma, CPromptPool, qkv_prefix
from intact.models.prefix import Prefix
from intact.models.shared_prompt import split_prompt


@dataclass(frozen=True)
class CPromptConfig:
    """``methods.c_prompt`` in config.yaml (defaults mirror it; the digits ViT has 4 blocks). The code's
    scripts: ImageNet-R pool 225 (15 per task), length 4, top-2, lr 0.005, h 6.5; configs/paper/*.yaml."""

    per_task: int = 3                       #: slots per task (pool = per_task * tasks; the code's prompt_per_task)
    length: int = 4                         #: expert prompt length (prompt_num): L/2 keys + L/2 values
    top_n: int = 2                          #: topN: selected slots, averaged into one prompt
    general_length: int = 4                 #: general prompt length (fixed 4 in the code)
    general_layers: tuple[int, ...] = (0, 1)
    expert_first: int = 2                   #: expert prompts at blocks expert_first..expert_last (inclusive):
    expert_last: int = 3                    #: the code: 2-4 of 12 (KA-Prompt's code: --e_s 2 --e_e 11)
    key_weight: float = 0.5                 #: pw, weight of the key cosine loss
    query: str = "token1"                   #: token1 (the code) | cls | patch_mean
    qkv_projection: bool = True             #: prompts through the frozen qkv (the code); false: used as K/V directly
    test_pool: str = "all"                  #: all (the code: every slot, trained or not) | seen (slices trained so far)
    ema_head: bool = True                   #: evaluate the adaptive EMA head (--use_ema_c --adapt_ema_c)
    #: adapt_h in gamma = 1 - exp(d / mean(d) - h): at an average step gamma = 1 - e^(1 - h), an EMA time
    #: constant of ~e^(h - 1) steps (h = 10, the code's default: ~8100; the scripts' 6.5-10 suit tasks of
    #: hundreds to thousands of steps). 3 (~7 steps) for the digits tasks of a few dozen steps.
    h: float = 3.0
    gamma_eps: float = 0.0                  #: added to mean(d) (C-Prompt: 0; KA-Prompt: 1e-5)
    protect: str = "ema"                    #: with +intact: ema (the evaluated head) | live (the trained head)
    lr: float | None = None                 #: one lr for every group (the code); null: optim.lr_head / lr_prompt
    weight_decay: float = 0.01              #: AdamW's (torch's default, which the code keeps)


class CPrompt(PromptMethod):
    """C-Prompt: general + expert prompts through the frozen qkv, evaluated with the adaptive EMA head."""

    settings_class: type = CPromptConfig
    key = "c_prompt"
    optimizer = torch.optim.AdamW

    def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
        cfg = build_dataclass(self.settings_class, self.run.settings, f"methods.{self.key}")
        self.check_layers(f"methods.{self.key}.general_layers", cfg.general_layers)
        expert = tuple(range(cfg.expert_first, cfg.expert_last + 1))
        if not expert:
            raise ValueError(f"methods.{self.key}: expert_last = {cfg.expert_last} < expert_first = {cfg.expert_first}")
        self.check_layers(f"methods.{self.key}.expert_last", expert)
        if cfg.protect not in ("ema", "live"):
            raise ValueError(f"methods.{self.key}.protect = {cfg.protect!r}: expected ema or live")
        self.cfg = cfg
        self.stored_query = cfg.query == "cls"
        return CPromptPool(embed_dim, num_tasks, cfg.per_task, cfg.length, cfg.top_n, cfg.general_length,
                           cfg.general_layers, expert, cfg.key_weight, cfg.test_pool)

    def __init__(self, run, backbone, num_classes: int, num_tasks: int):
        super().__init__(run, backbone, num_classes, num_tasks)
        self.ema = AdaptiveEma(self.head, self.pool.general, self.cfg.h, self.cfg.gamma_eps) if self.cfg.ema_head else None
        self._live_head = False  # set while a pass must use the live head at test time

    # ---- forward ------------------------------------------------------------------------------
    def query(self, x: torch.Tensor) -> torch.Tensor:
        if "query" in self.cached:
            return self.cached["query"]
        with torch.no_grad():
            return self.backbone.query(x, self.cfg.query)

    def prompt(self, pool: nn.Module, q: torch.Tensor) -> tuple[Prefix, torch.Tensor]:
        raw, aux = pool(q)
        return self.to_prefix(raw), aux

    def to_prefix(self, raw: dict[int, torch.Tensor]) -> Prefix:
        """Raw prompt tokens -> the prefix each block sees (through its frozen qkv, or split as they are)."""
        if not self.cfg.qkv_projection:
            return {l: split_prompt(p) for l, p in raw.items()}
        blocks = self.backbone.vit.blocks
        return {l: qkv_prefix(blocks[l].attn, p) for l, p in raw.items()}

    def evaluated_logits(self, z: torch.Tensor) -> torch.Tensor:
        """The head that is tested: the EMA head once it has been updated, else the live head."""
        if self.ema is not None and int(self.ema.registered) and not self._live_head:
            return self.ema(self.head, z)
        return self.head(z)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        z, _ = self.features(x, self.query(x))
        return self.evaluated_logits(z) if not self.training else self.head(z)

    # ---- hooks ----------------------------------------------------------------------------------
    def begin_task(self, task: int, train_set: Dataset) -> None:
        super().begin_task(task, train_set)
        if self.ema is not None and int(self.ema.registered) == 0:
            self.ema.start(self.pool.general)
        if self.protects_ema and self.reg.previous is not None:
            # the anchors are the head that was evaluated after the previous task
            self.reg.previous.load_state_dict(self.ema.shadow())

    @property
    def protects_ema(self) -> bool:
        return self.cfg.protect == "ema" and self.ema is not None and bool(int(self.ema.registered))

    def after_step(self) -> None:
        if self.ema is not None:
            self.ema.step(self.head, self.pool.general)

    def end_task(self, task: int, train_set: Dataset) -> dict[str, Any]:
        # the hypercubes and the certificate of the protected head: the EMA head swapped into the live
        # modules (the hooks sit on them), or the live head itself
        with (self.ema.swapped(self.head) if self.protects_ema else self.live_head()):
            out = super().end_task(task, train_set)
        if self.ema is not None:
            out["ema_gamma"] = float(self.ema.gamma)
        return out

    @contextmanager
    def live_head(self) -> Iterator[None]:
        self._live_head = True
        try:
            yield
        finally:
            self._live_head = False

    def param_groups(self) -> list[dict[str, Any]]:
        groups = super().param_groups()
        for g in groups:
            g["weight_decay"] = self.cfg.weight_decay
            if self.cfg.lr is not None:
                g["lr"] = self.cfg.lr
        return groups

