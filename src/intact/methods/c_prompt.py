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

The defaults are the digits run's, like every method's here (the digits ViT has 4 blocks: expert blocks
2-3; tasks of a few dozen steps: h = 3). The code's scripts: ImageNet-R pool 225 (15 per task), length 4,
top-2, lr 0.005, h 6.5; configs/paper/*.yaml. docs/c-prompt-ka-prompt.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from intact.methods.declare import Method
from intact.settings import setting

EVEN = {"minimum": 2, "multipleOf": 2}


@dataclass(frozen=True)
class CPromptSettings:
    """``methods.c_prompt``."""

    per_task: int = setting(3, "slots per task: the pool holds per_task * tasks key-prompt pairs (the code's prompt_per_task)",
                            minimum=1)
    length: int = setting(4, "expert prompt length (prompt_num): first half keys, second half values", **EVEN)
    top_n: int = setting(2, "selected slots (topN), averaged into one prompt", minimum=1)
    general_length: int = setting(4, "general prompt length (fixed 4 in the code)", **EVEN)
    general_layers: tuple[int, ...] = setting((0, 1), "blocks that get the general prompt", items={"minimum": 0})
    expert_first: int = setting(2, "expert prompts at blocks expert_first..expert_last (the code: 2-4 of 12)", minimum=0)
    expert_last: int = setting(3, "last expert block, inclusive (KA-Prompt's code: --e_s 2 --e_e 11)", minimum=0)
    key_weight: float = setting(0.5, "pw, weight of the selected keys' cosine loss", minimum=0)
    query: str = setting("token1", "the query: output token1 (the code) | cls | patch_mean",
                         enum=["token1", "cls", "patch_mean"])
    qkv_projection: bool = setting(True, "prompts through the frozen qkv (the code); false: used as K/V directly")
    test_pool: str = setting("all", "slots searched at test: all (the code: every slot, trained or not) | seen",
                             enum=["all", "seen"])
    ema_head: bool = setting(True, "evaluate the adaptive EMA head (--use_ema_c --adapt_ema_c)")
    #: gamma = 1 - exp(d / mean(d) - h): at an average step gamma = 1 - e^(1 - h), an EMA time constant of
    #: ~e^(h - 1) steps (the code's default h = 10: ~8100 steps; its scripts' 6.5-10 suit tasks of
    #: hundreds to thousands of steps; 3, ~7 steps, the digits tasks of a few dozen)
    h: float = setting(3.0, "adapt_h: EMA time constant ~e^(h-1) steps (the scripts: 6.5-10 for long tasks)")
    #: the authors' h spans a fixed number of *steps*; under another budget the same h spans another share
    #: of the task sequence. ema_span keeps the share: docs/c-prompt-ka-prompt.md, "The EMA head's span"
    ema_span: float | None = setting(None, "the EMA's time constant in tasks: h = 1 + ln(ema_span x the run's mean "
                                     "optimizer steps per task), set at every task; null: h as given", later=True,
                                     exclusiveMinimum=0)
    gamma_eps: float = setting(0.0, "added to mean(d) in the EMA's gamma (C-Prompt: 0; KA-Prompt: 1e-5)", minimum=0)
    protect: str = setting("ema", "with +intact, the head whose function is anchored: ema (evaluated) | live (trained)",
                           enum=["ema", "live"])
    lr: float | None = setting(None, "one lr for every group (the code); null: optim.lr_head / lr_prompt",
                               exclusiveMinimum=0)
    weight_decay: float = setting(0.01, "AdamW's weight decay (torch's default, which the code keeps)", minimum=0)


def ema_h(span: float, steps_per_task: Sequence[int]) -> float:
    """The ``h`` whose EMA time constant, ~e^(h-1) steps, is ``span`` tasks of the sequence's mean length."""
    return 1.0 + math.log(span * sum(steps_per_task) / len(steps_per_task))


def ema_span(h: float, steps_per_task: Sequence[int]) -> float:
    """The inverse of :func:`ema_h`: how many tasks of the mean length ``h``'s time constant spans."""
    return math.exp(h - 1.0) / (sum(steps_per_task) / len(steps_per_task))


def task_steps(run: Any, bench: Any, num_tasks: int) -> list[int]:
    """Every task's optimizer steps under the run's budget (epochs x batches), as the job counts them."""
    from intact.data.loader import steps_per_epoch

    o = run.optim
    return [o.epochs * steps_per_epoch(len(bench.train_set(t, run.eval_split)), o.batch_size, o.drop_last)
            for t in range(num_tasks)]


def check(s: CPromptSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    """The expert range: at least one block, and inside the backbone (the general blocks are layer_keys)."""
    if s.expert_last < s.expert_first:
        yield "expert_last", f"below expert_first = {s.expert_first}: no expert block"
    elif s.expert_last >= backbone.depth:
        yield "expert_last", (f"block {s.expert_last} does not exist: the backbone has depth {backbone.depth} "
                              f"(blocks 0-{backbone.depth - 1})")


def _forward(PromptMethod: type) -> type:
    """C-Prompt's forward path on ``PromptMethod``: the pool, the query token, the qkv prefix, the EMA head."""
    import torch
    from torch import nn

    from intact.models.c_prompt import AdaptiveEma, CPromptPool, qkv_prefix
    from intact.models.prefix import Prefix
    from intact.models.shared_prompt import split_prompt

    class CPromptForward(PromptMethod):
        def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
            s = self.cfg
            expert = tuple(range(s.expert_first, s.expert_last + 1))  # inside the backbone: check() says so
            self.stored_query = s.query == "cls"
            return CPromptPool(embed_dim, num_tasks, s.per_task, s.length, s.top_n, s.general_length,
                               s.general_layers, expert, s.key_weight, s.test_pool)

        def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
            super().__init__(run, settings, backbone, num_classes, num_tasks)
            self.ema = AdaptiveEma(self.head, self.pool.general, self.cfg.h, self.cfg.gamma_eps) if self.cfg.ema_head else None
            self._live_head = False  # set while a pass must use the live head at test time

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

    return CPromptForward


def implementation() -> type:
    """The method itself (imports torch: only a job calls this): the forward path + the task hooks."""
    from contextlib import contextmanager

    from intact.methods.shared.prompt import PromptMethod

    class CPrompt(_forward(PromptMethod)):
        """C-Prompt: general + expert prompts through the frozen qkv, evaluated with the adaptive EMA head."""

        def training_data(self, bench: Any, task: int) -> Any:
            if self.ema is not None and self.cfg.ema_span is not None:
                self.ema.h = ema_h(self.cfg.ema_span, task_steps(self.run, bench, self.num_tasks))
            return super().training_data(bench, task)

        def start_task(self, task: int, train_set: Any) -> None:
            super().start_task(task, train_set)   # after the penalties' snapshots: the pool moves on
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

        def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
            # the hypercubes and the certificate of the protected head: the EMA head swapped into the live
            # modules (the hooks sit on them), or the live head itself
            with (self.ema.swapped(self.head) if self.protects_ema else self.live_head()):
                out = super().end_task(task, train_set)
            if self.ema is not None:
                out["ema_gamma"] = float(self.ema.gamma)
                out["ema_h"] = float(self.ema.h)
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

    return CPrompt


METHOD = Method("c_prompt", CPromptSettings, implementation,
                "C-Prompt (Liu et al., IJCV 2024): general + expert prompts through the frozen qkv, adaptive EMA head, "
                "as its code runs it", accepts_intact=True, layer_keys=("general_layers",), check=check, optimizer="adamw")
