"""CPrompt (Gao et al., CVPR 2024, "Consistent Prompting for Rehearsal-Free Continual Learning"), as its code
(Zhanxin-Gao/CPrompt, ``models/cprompt.py``, ``network/cprompt_net.py``) runs it, in domain-incremental
learning as KA-Prompt's authors ran it: every domain is a task of all the classes, so the code's class keys
become one key per (domain, class) (their parameter count, 2,689,168 on ImageNet-R, has 15 x 200 keys).

Per domain ``t``: two prompt sets of ``length`` tokens (inserted after [CLS] at the input and before block
``second_block``; initialised from domain ``t - 1``'s), a classifier, and an auxiliary classifier used only in
training. The features are the frozen ViT's [CLS] before its final LayerNorm. Loss (the code's four terms):

* ``aux_ce``: CE of the auxiliary classifier on the features with domain ``t``'s prompts;
* ``ccl``: classifier consistency, ``alpha`` / t * sum over earlier domains' frozen classifiers on the same
  features (:func:`intact.models.cprompt.ccl_loss`, with ``margin`` and ``tau``);
* ``key``: CE of the query's cosines with all keys so far (earlier domains' detached) on the (domain, class)
  index; the query is the unprompted [CLS] before the final LayerNorm;
* ``ce`` (prompt consistency): each image takes the prompts of a random domain in 0..t, and domain t's
  classifier must classify it.

At test the nearest key's domain gives the prompts; every seen domain's classifier reads the features and
the class with the highest logit over all of them wins (the code concatenates the classifiers' logits; in
domain-incremental learning a class is the same in every domain: the maximum over domains).

``cprompt+intact`` is refused: each domain's classifier is frozen after its domain, so no head is shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from intact.methods.declare import Method
from intact.settings import setting


@dataclass(frozen=True)
class CPromptSettings:
    """``methods.cprompt`` (the code: 50 + 50 prompt tokens, the second set before block 5; exps/imagenetr.json:
    tau 1.15, margin 0.1, alpha 1.0)."""

    length: int = setting(5, "prompt tokens per set (two sets per domain; the code: 50)", minimum=1)
    second_block: int = setting(2, "the second set goes in before this block (the code: 5 of 12)", minimum=1)
    tau: float = setting(1.15, "CCL temperature where the current classifier is not confident", exclusiveMinimum=0)
    margin: float = setting(0.1, "CCL: the current classifier is confident above the old one's top logit + margin")
    alpha: float = setting(1.0, "weight of the CCL term (divided by the number of earlier domains)", minimum=0)


def _terms_penalty(Penalty: type) -> type:
    """The three terms besides the prompt-consistency CE, on the features the forward pass computed with the
    current domain's prompts (``method.own_features``), as a penalty."""
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call

    from intact.models.cprompt import ccl_loss, key_logits

    def frozen(head: Any, z: torch.Tensor) -> torch.Tensor:
        """An earlier domain's classifier on ``z``, its parameters fixed (the code's fix_branch_layer)."""
        return functional_call(head, {n: p.detach() for n, p in head.named_parameters()}, (z,))

    class CPromptTerms(Penalty):
        def terms(self, method: Any, batch: Any) -> dict[str, torch.Tensor]:
            t, C, s, z = method.task, method.num_classes, method.cfg, method.own_features
            out = {"aux_ce": F.cross_entropy(method.aux_head(z), batch.y)}
            if t > 0:
                with torch.no_grad():
                    current = method.heads[t](z)
                ccl = sum(ccl_loss(frozen(method.heads[k], z), current, s.margin, s.tau) for k in range(t))
                out["ccl"] = s.alpha * ccl / t
            out["key"] = F.cross_entropy(key_logits(batch.q, method.keys, (t + 1) * C, t * C), t * C + batch.y)
            return out

    return CPromptTerms


def _forward(ContinualMethod: type) -> type:
    """The per-domain prompts, classifiers and keys on ``ContinualMethod``: the training forward and the test path."""
    import torch
    from torch import nn

    from intact.models.cprompt import key_logits
    from intact.models.esn import prompted_tokens
    from intact.models.heads import Head
    from intact.seeding import task_generator

    class CPromptDomains(ContinualMethod):
        stored_query = False      # the query is [CLS] before the final LayerNorm: computed per task (exact)

        def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
            super().__init__(run, settings, backbone, num_classes, num_tasks)
            D, L = backbone.embed_dim, self.cfg.length
            self.prompts = nn.ParameterList([nn.Parameter(torch.zeros(2, L, D)) for _ in range(num_tasks)])
            self.heads = nn.ModuleList([Head(D, num_classes, run.head) for _ in range(num_tasks)])
            self.aux_head = Head(D, num_classes, run.head)
            self.keys = nn.Parameter(torch.zeros(num_tasks * num_classes, D))   #: one per (domain, class)
            self.register_buffer("domains", torch.tensor(0, dtype=torch.long))  #: domains trained
            #: optimizer steps of the current domain: the prompt-consistency draw of a step is a function of
            #: (seed, domain, step), so a resumed task replays it (the global RNG is not: a DataLoader's
            #: iterator draws its base seed from it when an epoch starts)
            self.register_buffer("step", torch.tensor(0, dtype=torch.long))
            self.own_features: torch.Tensor | None = None   #: this batch's features with the current prompts

        def query(self, x: torch.Tensor) -> torch.Tensor:
            if "query" in self.cached:
                return self.cached["query"]
            with torch.no_grad():
                return prompted_tokens(self.backbone, x, {})[:, 0]

        def feature_fns(self) -> dict[str, Any]:
            return {"query": self.query}

        def features(self, x: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
            """[CLS] before the final LayerNorm with ``prompts`` ((2, L, D) or (B, 2, L, D)) inserted."""
            first, second = prompts.unbind(dim=-3)
            return prompted_tokens(self.backbone, x, {0: first, self.cfg.second_block: second})[:, 0]

        def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, None, torch.Tensor]:
            t = self.task
            self.own_features = self.features(x, self.prompts[t])
            # prompt consistency: a random domain's prompts per image (earlier domains' fixed), domain t's classifier
            g = task_generator(self.run.seed, t, f"pcl{int(self.step)}")
            m = torch.randint(0, t + 1, (len(x),), generator=g).to(x.device)
            bank = torch.stack([p if j == t else p.detach() for j, p in enumerate(self.prompts[:t + 1])])
            return self.heads[t](self.features(x, bank[m])), None, self.query(x)

        def predict(self, x: torch.Tensor) -> torch.Tensor:
            n, C = max(int(self.domains), 1), self.num_classes
            domain = key_logits(self.query(x), self.keys, n * C, None).argmax(dim=1) // C
            z = self.features(x, torch.stack(list(self.prompts[:n]))[domain])
            return torch.stack([self.heads[d](z) for d in range(n)], dim=1).max(dim=1).values

    return CPromptDomains


def implementation() -> type:
    """The method itself (imports torch: only a job calls this): the forward part + the task hooks."""
    import math

    import torch
    from torch import nn

    from intact.methods.shared.base import ContinualMethod, Penalty
    from intact.models.esn import linear_init_
    from intact.seeding import task_generator

    Terms = _terms_penalty(Penalty)

    class CPrompt(_forward(ContinualMethod)):
        """Per-domain prompt pairs and classifiers on a frozen ViT; the domain by the nearest (domain, class) key."""

        def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
            super().__init__(run, settings, backbone, num_classes, num_tasks)
            self.penalties.insert(0, Terms())

        @torch.no_grad()
        def start_task(self, task: int, train_set: Any) -> None:
            self.step.zero_()
            g = task_generator(self.run.seed, task, "prompts")
            if task == 0:
                # the code: keys orthogonal (tensor_prompt(..., ortho=True)); prompts nn.Linear(D, L) weights
                nn.init.orthogonal_(self.keys, generator=g)
                bound = 1 / math.sqrt(self.backbone.embed_dim)
                self.prompts[0].copy_((torch.rand(self.prompts[0].shape, generator=g) * 2 - 1) * bound)
            else:
                self.prompts[task].copy_(self.prompts[task - 1])       # the code's update_fc: the previous domain's
            # both classifiers new at every domain (the code's update_fc), PyCIL's SimpleLinear init
            for head in (self.heads[task], self.aux_head):
                for _, layer in head.linears():
                    linear_init_(layer, g, bias_zero=True)

        def after_step(self) -> None:
            self.step += 1

        def param_groups(self) -> list[dict[str, Any]]:
            o, t = self.run.optim, self.task
            heads = [*self.heads[t].parameters(), *self.aux_head.parameters()]
            return [{"params": heads, "lr": o.lr_head, "name": "head"},
                    {"params": [self.prompts[t], self.keys], "lr": o.lr_prompt, "name": "prompts"}]

        def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
            self.domains.fill_(task + 1)
            self.own_features = None
            return {}

    return CPrompt


def check(s: CPromptSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    """The second prompt set goes in before a block of the backbone (refused at validation, not in the job)."""
    if backbone is not None and s.second_block >= backbone.depth:
        yield "second_block", f"the backbone has only {backbone.depth} blocks (0-{backbone.depth - 1})"


METHOD = Method("cprompt", CPromptSettings, implementation,
                "CPrompt (Gao et al., CVPR 2024): per-domain prompt pairs and classifiers with classifier and prompt "
                "consistency; the domain by the nearest (domain, class) key", accepts_intact=False,
                intact_refusal="it shares no head between domains (one classifier per domain, frozen after its domain; "
                               "the consistency loss only reads the earlier ones), so InTAct has no shared head to protect",
                check=check)
