"""CPrompt (Gao et al., CVPR 2024, "Consistent Prompting for Rehearsal-Free Continual Learning"), as its code
(Zhanxin-Gao/CPrompt, ``models/cprompt.py``, ``network/cprompt_net.py``) runs it. Named ``consistent_prompt`` here
(C-Prompt, another paper, is ``compositional_prompt``). Implementation: :mod:`intact.methods.impl.consistent_prompt`.
It runs in domain-incremental learning as KA-Prompt's authors ran it: every domain is a task of all the classes,
so the code's class keys become one key per (domain, class) (their parameter count, 2,689,168 on ImageNet-R, has
15 x 200 keys).

Per domain ``t``: two prompt sets of ``length`` tokens (inserted after [CLS] at the input and before block
``second_block``; initialised from domain ``t - 1``'s), a classifier, and an auxiliary classifier used only in
training. The features are the frozen ViT's [CLS] before its final LayerNorm. Loss (the code's four terms):

* ``aux_ce``: CE of the auxiliary classifier on the features with domain ``t``'s prompts;
* ``ccl``: classifier consistency, ``alpha`` / t * sum over earlier domains' frozen classifiers on the same
  features (with ``margin`` and ``tau``);
* ``key``: CE of the query's cosines with all keys so far (earlier domains' detached) on the (domain, class)
  index; the query is the unprompted [CLS] before the final LayerNorm;
* ``ce`` (prompt consistency): each image takes the prompts of a random domain in 0..t, and domain t's
  classifier must classify it.

At test the nearest key's domain gives the prompts; every seen domain's classifier reads the features and
the class with the highest logit over all of them wins (the code concatenates the classifiers' logits; in
domain-incremental learning a class is the same in every domain: the maximum over domains).

``consistent_prompt+intact`` is refused: each domain's classifier is frozen after its domain, so no head is
shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator

from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class ConsistentPromptSettings:
    """``methods.consistent_prompt`` (the code: 50 + 50 prompt tokens, the second set before block 5;
    exps/imagenetr.json: tau 1.15, margin 0.1, alpha 1.0)."""

    length: int = setting(5, "prompt tokens per set (two sets per domain; the code: 50)", minimum=1)
    second_block: int = setting(2, "the second set goes in before this block (the code: 5 of 12)", minimum=1)
    tau: float = setting(1.15, "CCL temperature where the current classifier is not confident", exclusiveMinimum=0)
    margin: float = setting(0.1, "CCL: the current classifier is confident above the old one's top logit + margin")
    alpha: float = setting(1.0, "weight of the CCL term (divided by the number of earlier domains)", minimum=0)


def check(s: ConsistentPromptSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    """The second prompt set goes in before a block of the backbone (refused at validation, not in the job)."""
    if backbone is not None and s.second_block >= backbone.depth:
        yield "second_block", f"the backbone has only {backbone.depth} blocks (0-{backbone.depth - 1})"


METHOD = Method("consistent_prompt", ConsistentPromptSettings, "intact.methods.impl.consistent_prompt:ConsistentPrompt",
                "CPrompt (Gao et al., CVPR 2024): prompt pairs with classifier and prompt consistency; the domain "
                "by the nearest (domain, class) key", accepts_intact=False,
                intact_refusal="it shares no head between domains (one classifier per domain, frozen after its "
                               "domain; the consistency loss only reads the earlier ones), so InTAct has no shared "
                               "head to protect", check=check)
