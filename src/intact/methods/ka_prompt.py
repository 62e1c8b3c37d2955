"""KA-Prompt (ICML 2025), on top of C-Prompt, as its code (zhoujiahuan1991/ICML2025-KA-Prompt,
``models/kaprompt_vit.py``, ``scripts/*.sh``) runs it.

What it adds to C-Prompt (:mod:`intact.methods.compositional_prompt`); implementation:
:mod:`intact.methods.impl.ka_prompt`:

* the query is the mean of the patch tokens (``--query_pos -1`` in every script);
* **greedy initialisation**: at task ``t > 0`` the new slice is filled from the old slots whose keys cover
  the new task's queries best (greedy maximum coverage on ``(cos + 1) / 2``); a slot with nothing left to
  cover is the mean of two picked slots drawn from the run's seed;
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

from intact.methods.compositional_prompt import CompositionalPromptSettings, check
from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class KAPromptSettings(CompositionalPromptSettings):
    """``methods.ka_prompt``: C-Prompt's settings (two defaults changed) + its own three."""

    query: str = setting("patch_mean", "the query: patch_mean (--query_pos -1, every script) | token1 | cls",
                         enum=["token1", "cls", "patch_mean"])
    gamma_eps: float = setting(1e-5, "added to mean(d) in the EMA's gamma (C-Prompt: 0; KA-Prompt: 1e-5)", minimum=0)
    greedy_init: bool = setting(True, "fill each new slice from the old slots that cover its queries best")
    tau: float = setting(0.01, "temperature of the old prompts' fusion weights", exclusiveMinimum=0)
    aux_weight: float = setting(0.1, "weight of the previous model's fused-prompt CE (the scripts: 0.1 or 1.0)",
                                minimum=0)


METHOD = Method("ka_prompt", KAPromptSettings, "intact.methods.impl.ka_prompt:KAPrompt",
                "KA-Prompt (ICML 2025) on C-Prompt: greedy slice initialisation + the previous model's fused-prompt "
                "loss, as its code runs it", accepts_intact=True, layer_keys=("general_layers",), check=check,
                optimizer="adamw")
