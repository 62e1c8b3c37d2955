"""C-Prompt (Liu et al., IJCV 2024, "Compositional Prompting for Anti-Forgetting in Domain Incremental Learning";
github zhoujiahuan1991/IJCV2024-C-Prompt), as its code runs it; declared in :mod:`intact.methods.compositional_prompt`.
KA-Prompt (:mod:`intact.methods.impl.ka_prompt`) builds on it. Its parts:

* :class:`CompositionalPool` - general prompts (shared by every image) at ``general_layers`` and a pool of
  key-prompt pairs whose prompts are inserted at ``expert_layers``. Task ``t`` owns the slice
  ``[t * per_task, (t + 1) * per_task)``. Training selects the top-N keys *within the current slice*,
  testing over the whole pool (the code: every slot, trained or not; ``test_pool: seen`` keeps the slices
  trained so far); the N selected prompts are **averaged** into one prompt (``--fuse_prompt``).
  One key set serves every layer (the code keeps keys per layer but only ever reads layer 0's).
* :func:`qkv_prefix` - the code inserts the raw prompt tokens into the attention *input* (after the
  block's LayerNorm), so they go through the frozen ``qkv``: the prefix keys are ``W_k p + b_k`` of the
  prompt's first half and the values ``W_v p + b_v`` of its second half. That is a post-projection prefix
  ``W p + b`` on our prefix path, with no LayerNorm on the prompts.
* :class:`AdaptiveEma` - the evaluated classifier: an exponential moving average of the live head
  updated after every optimizer step with ``gamma = 1 - exp(d / mean(d) - h)``, ``d`` the L2 change of
  the general prompts in that step and ``mean(d)`` its running mean over all steps so far.
* :class:`CompositionalPrompt` - the method: the pool, the query token, the qkv prefix, the EMA head.

All state lives in parameters and buffers, so a task's saved state carries it to the next task and a
resumed job continues exactly.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from timm.layers import Attention
from torch import nn
from torch.func import functional_call

from intact.methods.compositional_prompt import ema_h, task_steps
from intact.methods.shared.frozen import QUERY, frozen_feature
from intact.methods.shared.prompt import PromptMethod
from intact.models.prefix import Prefix
from intact.models.shared_prompt import check_length, split_prompt
from intact.models.task_index import TaskIndexed

#: layer index -> raw prompt tokens (B, L, D): keys = first L/2 rows, values = last L/2 rows
RawPrompts = dict[int, torch.Tensor]


def qkv_prefix(attn: Attention, prompt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt tokens ``(B, L, D)`` through the frozen ``attn.qkv``: prefix keys ``W_k p + b_k`` of the first
    ``L/2`` rows, prefix values ``W_v p + b_v`` of the last ``L/2`` rows (post-projection, ``(B, L/2, D)``)."""
    half = prompt.shape[1] // 2
    D = prompt.shape[-1]
    w, b = attn.qkv.weight, attn.qkv.bias
    wk, wv = w[D:2 * D], w[2 * D:]
    bk, bv = (b[D:2 * D], b[2 * D:]) if b is not None else (None, None)
    return F.linear(prompt[:, :half], wk, bk), F.linear(prompt[:, half:], wv, bv)


def uniform_range_(t: torch.Tensor, low: float, high: float, generator: torch.Generator) -> None:
    """``U(low, high)`` drawn on the CPU from ``generator`` (device-independent), in place."""
    with torch.no_grad():
        t.copy_(low + (high - low) * torch.rand(t.shape, generator=generator, dtype=t.dtype))


class CompositionalPool(TaskIndexed):
    """General prompts + the key-prompt pool; ``forward(query) -> (raw prompts per layer, key loss)``."""

    def __init__(self, embed_dim: int, num_tasks: int, per_task: int, length: int, top_n: int,
                 general_length: int, general_layers: tuple[int, ...], expert_layers: tuple[int, ...],
                 key_weight: float = 0.5, test_pool: str = "all"):
        super().__init__()
        check_length(length, "expert prompt length")
        check_length(general_length, "general prompt length")
        if not 1 <= top_n <= per_task:
            raise ValueError(f"top_n = {top_n}: expected 1 <= top_n <= per_task = {per_task} (selection is within a "
                             "task's slice)")
        if test_pool not in ("all", "seen"):
            raise ValueError(f"test_pool = {test_pool!r}: expected all or seen")
        self.per_task, self.top_n, self.key_weight, self.test_pool = per_task, top_n, key_weight, test_pool
        self.general_layers, self.expert_layers = tuple(general_layers), tuple(expert_layers)
        size = per_task * num_tasks
        self.keys = nn.Parameter(torch.zeros(size, embed_dim))
        self.prompts = nn.ParameterDict({str(l): nn.Parameter(torch.zeros(size, length, embed_dim))
                                         for l in self.expert_layers})
        self.general = nn.ParameterDict({str(l): nn.Parameter(torch.zeros(general_length, embed_dim))
                                         for l in self.general_layers})
        self.register_task()
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.long))
        #: the slots the last forward selected (B, N): KA-Prompt's auxiliary loss reads them
        self.last_selection: torch.Tensor | None = None

    def slice(self, task: int | None = None) -> tuple[int, int]:
        t = self.task_index if task is None else task
        return t * self.per_task, (t + 1) * self.per_task

    def begin_task(self, task: int, generator: torch.Generator) -> None:
        """Initialise the whole pool once, as the code does at start-up: general prompts and keys
        ``U(0, 1)``, expert prompts ``U(-1, 1)``; then make ``task`` current."""
        if int(self.initialized) == 0:
            for p in self.general.values():
                uniform_range_(p, 0.0, 1.0, generator)
            uniform_range_(self.keys, 0.0, 1.0, generator)
            for p in self.prompts.values():
                uniform_range_(p, -1.0, 1.0, generator)
            self.initialized.fill_(1)
        self.set_task(task)

    def select(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-N slots by cosine(query, key) and their distances ``1 - cos`` (both (B, N)): within the
        current task's slice while training, over the pool (``test_pool``) otherwise."""
        if self.training:
            s, f = self.slice()
        else:
            s, f = 0, (self.slice()[1] if self.test_pool == "seen" else self.keys.shape[0])
        cos = F.normalize(query, dim=1) @ F.normalize(self.keys[s:f], dim=1).T
        val, idx = cos.topk(self.top_n, dim=1)
        return idx + s, 1 - val

    def forward(self, query: torch.Tensor) -> tuple[RawPrompts, torch.Tensor]:
        idx, dist = self.select(query)
        self.last_selection = idx
        B = query.shape[0]
        raw: RawPrompts = {l: self.general[str(l)].expand(B, -1, -1) for l in self.general_layers}
        for l in self.expert_layers:
            raw[l] = self.prompts[str(l)][idx].mean(1)          # the N selected prompts averaged
        aux = self.key_weight * dist.sum(1).mean() if self.training else query.new_zeros(())
        return raw, aux


class AdaptiveEma(nn.Module):
    """C-Prompt's adaptive EMA of a head (buffers only: saved with the state, never trained)."""

    def __init__(self, head: nn.Module, general: nn.ParameterDict, h: float, eps: float = 0.0):
        super().__init__()
        self.h, self.eps = h, eps
        self.names = [n for n, p in head.named_parameters()]
        for n, p in head.named_parameters():
            self.register_buffer("shadow_" + n.replace(".", "__"), torch.zeros_like(p))
        for l, g in general.items():
            self.register_buffer("before_" + l, torch.zeros_like(g))
        self.register_buffer("registered", torch.tensor(0, dtype=torch.long))
        self.register_buffer("steps", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("change_sum", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("gamma", torch.tensor(0.0, dtype=torch.float64))

    def shadow(self) -> dict[str, torch.Tensor]:
        return {n: getattr(self, "shadow_" + n.replace(".", "__")) for n in self.names}

    def start(self, general: nn.ParameterDict) -> None:
        """Remember the general prompts as initialised (the code copies them at start-up)."""
        with torch.no_grad():
            for l, g in general.items():
                getattr(self, "before_" + l).copy_(g)

    @torch.no_grad()
    def step(self, head: nn.Module, general: nn.ParameterDict) -> None:
        """After an optimizer step: ``gamma`` from the general prompts' change, then the EMA update (the
        first update only copies the head)."""
        d2 = sum(((g.double() - getattr(self, "before_" + l).double()) ** 2).sum() for l, g in general.items())
        d = torch.sqrt(d2)
        self.steps += 1
        self.change_sum += d
        mean = self.change_sum / self.steps
        self.gamma.copy_(1 - torch.exp(d / (mean + self.eps) - self.h))
        for l, g in general.items():
            getattr(self, "before_" + l).copy_(g)
        params = dict(head.named_parameters())
        first = int(self.registered) == 0
        for n, s in self.shadow().items():
            p = params[n].detach()
            s.copy_(p if first else (self.gamma * s.double() + (1 - self.gamma) * p.double()).to(s.dtype))
        self.registered.fill_(1)

    def forward(self, head: nn.Module, z: torch.Tensor) -> torch.Tensor:
        """The EMA head's logits (the live head's modules with the shadow weights)."""
        return functional_call(head, self.shadow(), (z,))

    @contextmanager
    def swapped(self, head: nn.Module) -> Iterator[None]:
        """Within the block the live head holds the shadow weights (restored afterwards)."""
        params = dict(head.named_parameters())
        backup = {n: p.detach().clone() for n, p in params.items()}
        with torch.no_grad():
            for n, s in self.shadow().items():
                params[n].copy_(s)
        try:
            yield
        finally:
            with torch.no_grad():
                for n, b in backup.items():
                    params[n].copy_(b)




class CompositionalPrompt(PromptMethod):
    """C-Prompt: general + expert prompts through the frozen qkv, evaluated with the adaptive EMA head."""

    def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
        s = self.cfg
        expert = tuple(range(s.expert_first, s.expert_last + 1))  # inside the backbone: check() says so
        return CompositionalPool(embed_dim, num_tasks, s.per_task, s.length, s.top_n, s.general_length,
                                 s.general_layers, expert, s.key_weight, s.test_pool)

    def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
        super().__init__(run, settings, backbone, num_classes, num_tasks)
        self.num_tasks = num_tasks
        s = self.cfg
        self.ema = AdaptiveEma(self.head, self.pool.general, s.h, s.gamma_eps) if s.ema_head else None
        self._live_head = False  # set while a pass must use the live head at test time
        self.intact.predicting = self.evaluated_head

    # ---- forward: the query token, the qkv prefix, the EMA head ----------------------------------------
    @frozen_feature(QUERY, benchmark_cache=lambda self: self.cfg.query == "cls")
    def query(self, x: torch.Tensor) -> torch.Tensor:
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

    # ---- the task hooks ----------------------------------------------------------------------------------
    def training_data(self, bench: Any, task: int) -> Any:
        if self.ema is not None and self.cfg.ema_span is not None:
            self.ema.h = ema_h(self.cfg.ema_span, task_steps(self.run, bench, self.num_tasks))
        return super().training_data(bench, task)

    def begin_task(self, task: int, train_set: Any) -> None:
        super().begin_task(task, train_set)   # after the penalties' snapshots: the pool moves on
        if self.ema is not None and int(self.ema.registered) == 0:
            self.ema.start(self.pool.general)

    @property
    def protects_ema(self) -> bool:
        return self.cfg.protect == "ema" and self.ema is not None and bool(int(self.ema.registered))

    def after_step(self) -> None:
        if self.ema is not None:
            self.ema.step(self.head, self.pool.general)

    def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
        if self.ema is None:
            return {}
        return {"ema_gamma": float(self.ema.gamma), "ema_h": float(self.ema.h)}

    @contextmanager
    def evaluated_head(self) -> Iterator[nn.Module]:
        """The head that is tested, in the live modules (InTAct's hooks sit on them): the EMA head's weights
        swapped in where it is the protected one (``protect: ema``), else the live head, used as it is at test
        time. Its copy is the anchors; its hypercubes and certificate are recorded."""
        with (self.ema.swapped(self.head) if self.protects_ema else self.live_head()):
            yield self.head

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
