"""ESN (Wang et al., AAAI 2023, "Isolation and Impartial Aggregation"), as its code (iamwangyabin/ESN,
``networks.py``, ``trainer.py``) runs it, in domain-incremental learning as its CORe50 setting (``--dil``:
one stage per domain, each stage a classifier over all the classes).

Per stage (domain) ``t``: a task token, a class-attention block (ConViT's, ``mlp_ratio`` 0.5) over the
frozen ViT's tokens before its final LayerNorm, and a classifier; trained with CE + ``lambda_energy`` *
(free energy - ``anchor_energy``)^2, which keeps every stage's energy at the same level. A shared prompt of
``length`` tokens goes in after [CLS] at the input. After the stage, the temperature whose energies pick the
stage for the most of its own training images is kept (stage 0: ``first_temperature``). At test every
distinct kept temperature votes for the stage of highest energy ``logsumexp(logits / T)``; the winning
stage's classifier classifies the image.

The prompt: the code means to train it at the first stage only (``freezep=True`` afterwards), but it then
replaces the frozen prompt by a copy of the previous stage's trainable one, so the released code trains
it at every stage and evaluates all stages with the latest prompt (``prompt_training: every_task``, the
default); ``first_task`` is the flag's intent. docs/methods-main-table.md lists every departure.

``esn+intact`` is refused: nothing in a head is shared between domains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from intact.methods.declare import Method
from intact.settings import setting

#: the code's "fast mode" candidates (``trainer.py``, ``candidata_temperatures``)
TEMPERATURES = (0.001, 0.01, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass(frozen=True)
class ESNSettings:
    """``methods.esn`` (the code: 100 prompt tokens, mlp_ratio 0.5, anchor -10, beta 1, lamda 0.1)."""

    length: int = setting(10, "shared prompt tokens after [CLS] (the code: 100)", minimum=0)
    prompt_training: str = setting("every_task", "every_task (the released code) or first_task (its freezep flag's intent)",
                                   enum=["every_task", "first_task"])
    mlp_ratio: float = setting(0.5, "hidden width / D of each stage's class-attention MLP", exclusiveMinimum=0)
    lambda_energy: float = setting(0.1, "lamda: weight of (free energy - anchor_energy)^2", minimum=0)
    anchor_energy: float = setting(-10.0, "the energy every stage is pulled to")
    energy_beta: float = setting(1.0, "beta of the free energy -logsumexp(-beta * logits) / beta", exclusiveMinimum=0)
    temperatures: tuple[float, ...] = setting(TEMPERATURES, "candidate temperatures of the stage vote", minItems=1,
                                              items={"exclusiveMinimum": 0})
    first_temperature: float = setting(0.001, "stage 0's temperature (no earlier stage to separate from)",
                                       exclusiveMinimum=0)


def check(s: ESNSettings, bench: Any, backbone: Any) -> Iterator[tuple[str, str]]:
    if len(set(s.temperatures)) != len(s.temperatures):
        yield "temperatures", "lists a temperature twice"


def _energy_penalty(Penalty: type) -> type:
    """The anchor-based energy alignment as a penalty (its term ``energy``), on the stage's own logits."""
    from intact.models.esn import free_energy

    class EnergyAlign(Penalty):
        def terms(self, method: Any, batch: Any) -> dict[str, Any]:
            s = method.cfg
            if s.lambda_energy <= 0:
                return {}
            energy = free_energy(batch.logits.float(), s.energy_beta)
            return {"energy": s.lambda_energy * (energy - s.anchor_energy).pow(2).mean()}

    return EnergyAlign


def _stages(ContinualMethod: type) -> type:
    """The shared prompt and the per-stage modules on ``ContinualMethod``: training one stage, the vote at test."""
    import torch
    from torch import nn

    from intact.models.esn import ClassAttentionBlock, prompted_tokens, vote
    from intact.models.heads import Head

    class ESNStages(ContinualMethod):
        stored_query = False      # no query: the stage is chosen by energies

        def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
            super().__init__(run, settings, backbone, num_classes, num_tasks)
            D, heads = backbone.embed_dim, backbone.vit.blocks[0].attn.num_heads   # the code: 12, ViT-B's
            self.prompt = nn.Parameter(torch.zeros(self.cfg.length, D))
            self.tokens = nn.ParameterList([nn.Parameter(torch.zeros(1, 1, D)) for _ in range(num_tasks)])
            self.blocks = nn.ModuleList([ClassAttentionBlock(D, heads, self.cfg.mlp_ratio) for _ in range(num_tasks)])
            self.heads = nn.ModuleList([Head(D, num_classes, run.head) for _ in range(num_tasks)])
            self.register_buffer("temperature", torch.zeros(num_tasks))             #: kept per stage
            self.register_buffer("domains", torch.tensor(0, dtype=torch.long))      #: stages with a temperature

        def tokens_of(self, x: torch.Tensor) -> torch.Tensor:
            if not self.cfg.length:
                return prompted_tokens(self.backbone, x, {})
            # a prompt this stage does not train: no backward pass through the frozen ViT
            return prompted_tokens(self.backbone, x, {0: self.prompt if self.trains_prompt() else self.prompt.detach()})

        def stage_logits(self, tokens: torch.Tensor, stage: int) -> torch.Tensor:
            return self.heads[stage](self.blocks[stage](self.tokens[stage], tokens))

        def all_logits(self, x: torch.Tensor, stages: int) -> torch.Tensor:
            """(B, stages, C): every stage's logits on the same prompted tokens."""
            tokens = self.tokens_of(x)
            return torch.stack([self.stage_logits(tokens, s) for s in range(stages)], dim=1)

        def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, None, None]:
            return self.stage_logits(self.tokens_of(x), self.task), None, None

        def predict(self, x: torch.Tensor) -> torch.Tensor:
            n = max(int(self.domains), 1)
            logits = self.all_logits(x, n)
            temps = self.temperature[:n].tolist() if int(self.domains) else [self.cfg.first_temperature]
            stage = vote(logits, temps)
            return logits[torch.arange(len(x), device=x.device), stage]

        def trains_prompt(self) -> bool:
            return self.cfg.length > 0 and (self.cfg.prompt_training == "every_task" or self.task == 0)

        def param_groups(self) -> list[dict[str, Any]]:
            o, t = self.run.optim, self.task
            stage = [self.tokens[t], *self.blocks[t].parameters(), *self.heads[t].parameters()]
            groups = [{"params": stage, "lr": o.lr_head, "name": "stage"}]
            if self.trains_prompt():
                groups.append({"params": [self.prompt], "lr": o.lr_prompt, "name": "prompt"})
            return groups

    return ESNStages


def implementation() -> type:
    """The method itself (imports torch: only a job calls this): the stages + the task hooks."""
    import math

    import torch

    from intact.data.loader import eval_batches
    from intact.methods.shared.base import ContinualMethod, Penalty
    from intact.models.esn import choose_temperature, linear_init_
    from intact.seeding import task_generator

    EnergyAlign = _energy_penalty(Penalty)

    class ESN(_stages(ContinualMethod)):
        """Stage-isolated class-attention classifiers on a frozen, prompted ViT; the stage chosen by an energy vote."""

        def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
            super().__init__(run, settings, backbone, num_classes, num_tasks)
            self.penalties.insert(0, EnergyAlign())

        def start_task(self, task: int, train_set: Any) -> None:
            g = task_generator(self.run.seed, task, "stage")
            with torch.no_grad():
                if task == 0 and self.cfg.length:
                    # the code's prompt is an nn.Linear(D, length) weight: U(-1/sqrt(D), 1/sqrt(D))
                    bound = 1 / math.sqrt(self.backbone.embed_dim)
                    self.prompt.copy_((torch.rand(self.prompt.shape, generator=g) * 2 - 1) * bound)
                self.tokens[task].copy_(self.backbone.vit.cls_token)      # the code: a copy of the pretrained [CLS]
                self.blocks[task].reset(g)
                for _, layer in self.heads[task].linears():
                    linear_init_(layer, g)

        @torch.no_grad()
        def end_task(self, task: int, train_set: Any) -> dict[str, Any]:
            """Keep the temperature that best separates this stage's own training images from the earlier stages'."""
            if task == 0:
                temp = self.cfg.first_temperature
            else:
                device = self.temperature.device
                logits = torch.cat([self.all_logits(x, task + 1)
                                    for x, _ in eval_batches(train_set, self.run.optim.eval_batch_size, device)])
                temp = choose_temperature(logits, task, self.cfg.temperatures)
            self.temperature[task] = temp
            self.domains.fill_(task + 1)
            return {"esn": {"temperature": temp, "temperatures": self.temperature[:task + 1].tolist()}}

    return ESN


METHOD = Method("esn", ESNSettings, implementation,
                "ESN (Wang et al., AAAI 2023): a class-attention block, task token and classifier per domain on a "
                "prompted frozen ViT, energy-aligned; the domain by a temperature vote over energies",
                accepts_intact=False,
                intact_refusal="it shares no head between domains (a class-attention block, task token and classifier "
                               "per domain; the stage is chosen by an energy vote), so InTAct has no shared head to protect",
                check=check)
