"""C-Prompt (Liu et al., IJCV 2024, "Compositional Prompting for Anti-Forgetting in Domain Incremental Learning"),
as its code (zhoujiahuan1991/IJCV2024-C-Prompt, ``models/cprompt_vit.py``) runs it. Named ``compositional_prompt``
here (CPrompt, another paper, is ``consistent_prompt``). Implementation:
:mod:`intact.methods.impl.compositional_prompt`.

Per image: the query is output token 1 of the frozen ViT; the top-N keys of the current task's slice
(training) or of the whole pool (test) pick N expert prompts, averaged into one and inserted at the expert
blocks; the general prompts go in at the general blocks; every prompt is projected through the block's
frozen ``qkv``. Loss: CE + ``key_weight`` * sum of the selected keys' cosine distances. The optimizer is AdamW
(its default weight decay 0.01), fresh at every task. The head that is *evaluated* is the adaptive EMA of the
live head.

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
from typing import Any
from collections.abc import Iterator, Sequence

from intact.methods.declare import Method
from intact.settings import setting

EVEN = {"minimum": 2, "multipleOf": 2}


@dataclass(frozen=True)
class CompositionalPromptSettings:
    """``methods.compositional_prompt``."""

    per_task: int = setting(3, "slots (key-prompt pairs) per task (the code's prompt_per_task)", minimum=1)
    length: int = setting(4, "expert prompt length (prompt_num; halves: keys, values)", **EVEN)
    top_n: int = setting(2, "selected slots (topN), averaged into one prompt", minimum=1)
    general_length: int = setting(4, "general prompt length (fixed 4 in the code)", **EVEN)
    general_layers: tuple[int, ...] = setting((0, 1), "blocks that get the general prompt", items={"minimum": 0})
    expert_first: int = setting(2, "first expert block (the code: 2-4 of 12)",
                                minimum=0)
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
    ema_span: float | None = setting(None, "the EMA's span in tasks: h = 1 + ln(ema_span x mean steps per task); "
                                     "null: h", later=True,
                                     exclusiveMinimum=0)
    gamma_eps: float = setting(0.0, "added to mean(d) in the EMA's gamma (C-Prompt: 0; KA-Prompt: 1e-5)", minimum=0)
    protect: str = setting("ema", "+intact anchors the ema (evaluated) or live (trained) head", enum=["ema", "live"])
    lr: float | None = setting(None, "one lr for every group (the code); null: optim.lr_head / lr_prompt",
                               exclusiveMinimum=0)
    weight_decay: float = setting(0.01, "AdamW's weight decay (torch's default, which the code keeps)", minimum=0)


def ema_h(span: float, steps_per_task: Sequence[int]) -> float:
    """The ``h`` whose EMA time constant, ~e^(h-1) steps, is ``span`` tasks of the sequence's mean length; a span
    under one step is refused (h < 1: gamma < 0 at an average step, an EMA that overshoots and diverges)."""
    mean = sum(steps_per_task) / len(steps_per_task)
    if span * mean < 1:
        raise ValueError(f"ema_span = {span:g} tasks is under one step of this run's tasks ({mean:g} steps on "
                         f"average): at least {1 / mean:.3g}")
    return 1.0 + math.log(span * mean)


def ema_span(h: float, steps_per_task: Sequence[int]) -> float:
    """The inverse of :func:`ema_h`: how many tasks of the mean length ``h``'s time constant spans."""
    return math.exp(h - 1.0) / (sum(steps_per_task) / len(steps_per_task))


def task_steps(run: Any, bench: Any, num_tasks: int) -> list[int]:
    """Every task's optimizer steps under the run's budget (epochs x batches), as the job counts them."""
    from intact.data.loader import steps_per_epoch

    o = run.optim
    return [o.epochs * steps_per_epoch(len(bench.train_set(t, run.eval_split)), o.batch_size, o.drop_last)
            for t in range(num_tasks)]


def check(s: CompositionalPromptSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    """The expert range: at least one block, inside the backbone (the general blocks are layer_keys) and apart from
    the general blocks; the selection within a task's slice; general prompts for the adaptive EMA to follow."""
    if s.expert_last < s.expert_first:
        yield "expert_last", f"below expert_first = {s.expert_first}: no expert block"
    elif s.expert_last >= backbone.depth:
        yield "expert_last", (f"block {s.expert_last} does not exist: the backbone has depth {backbone.depth} "
                              f"(blocks 0-{backbone.depth - 1})")
    both = sorted(set(s.general_layers) & set(range(s.expert_first, s.expert_last + 1)))
    if both:
        yield "expert_first", (f"blocks {both} would get both the general and an expert prompt (general_layers = "
                               f"{list(s.general_layers)}); C-Prompt's code gives such a block only the general one "
                               "and leaves its expert prompts untrained: make the two ranges disjoint")
    if s.top_n > s.per_task:
        yield "top_n", f"above per_task = {s.per_task}: training selects within the task's slice of the pool"
    if s.ema_head and not s.general_layers:
        yield "general_layers", ("is empty, but the adaptive EMA head (ema_head) takes its gamma from the general "
                                 "prompts' change at each step: name general blocks, or set ema_head: false")


METHOD = Method("compositional_prompt", CompositionalPromptSettings,
                "intact.methods.impl.compositional_prompt:CompositionalPrompt",
                "C-Prompt (Liu et al., IJCV 2024): general + expert prompts through the frozen qkv, adaptive EMA head, "
                "as its code runs it", accepts_intact=True, layer_keys=("general_layers",), check=check,
                optimizer="adamw")
