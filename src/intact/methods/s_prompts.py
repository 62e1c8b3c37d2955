"""S-Prompts (Wang et al., NeurIPS 2022): one prompt and one head per domain, the domain chosen by k-means.

Task ``t`` trains its own prompt tokens (inserted after [CLS] at the input) and its own head with plain
cross-entropy; nothing is shared between domains, so nothing is forgotten - and InTAct, which protects a
shared component, has nothing to protect (``s_prompts+intact`` is refused, with the declaration's reason).
At the end of the task, ``clusters`` k-means centres of the domain's unprompted, normalised [CLS] features
are kept; at test the nearest centre picks the domain, whose prompt and head classify the image.

The unprompted [CLS] is the frozen backbone's query: it is read from the feature caches where they
exist, both for the k-means (the end-of-task pass over the training images) and for the domain choice
at test - exactly the values the live path computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class SPromptsSettings:
    """``methods.s_prompts`` (official: 10 prompt tokens, k = 5, L1 distance)."""

    length: int = setting(10, "prompt tokens per domain, inserted after [CLS]", minimum=1)
    clusters: int = setting(5, "k-means centres per domain", minimum=1)
    distance: str = setting("l1", "l1 (the official code) | l2 (the paper's nearest neighbour)", enum=["l1", "l2"])


METHOD = Method("s_prompts", SPromptsSettings, "intact.methods.impl.s_prompts:SPrompts",
                "S-Prompts (Wang et al., NeurIPS 2022): prompt tokens after [CLS]", accepts_intact=False,
                intact_refusal="it shares no component between domains (one prompt and one head per domain, the "
                               "domain picked by k-means), so InTAct has nothing to protect")
