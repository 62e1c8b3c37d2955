"""ESN (Wang et al., AAAI 2023): a class-attention block, task token and classifier per stage (domain) on a prompted
frozen ViT, energy-aligned; the stage chosen by a temperature vote over energies. Declared in
:mod:`intact.methods.esn`; its parts shared with CPrompt (the prompted tokens, the class-attention block, the
energies) are :mod:`intact.models.esn`."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from intact.methods.shared.base import Batch, ContinualMethod, Penalty, batches
from intact.models.esn import ClassAttentionBlock, choose_temperature, free_energy, linear_init_, prompted_tokens, vote
from intact.models.heads import Head
from intact.seeding import task_generator


class EnergyAlign(Penalty):
    """The anchor-based energy alignment (its term ``energy``), on the stage's own logits."""

    def terms(self, method: ContinualMethod, batch: Batch) -> dict[str, torch.Tensor]:
        s = method.cfg
        if s.lambda_energy <= 0:
            return {}
        energy = free_energy(batch.logits.float(), s.energy_beta)
        return {"energy": s.lambda_energy * (energy - s.anchor_energy).pow(2).mean()}


class ESN(ContinualMethod):
    """Stage-isolated class-attention classifiers on a frozen, prompted ViT; the stage chosen by an energy vote."""

    def __init__(self, run, settings, backbone, num_classes: int, num_tasks: int):
        super().__init__(run, settings)
        self.backbone = backbone
        D, heads = backbone.embed_dim, backbone.vit.blocks[0].attn.num_heads   # the code: 12, ViT-B's
        self.prompt = nn.Parameter(torch.zeros(self.cfg.length, D))
        self.tokens = nn.ParameterList([nn.Parameter(torch.zeros(1, 1, D)) for _ in range(num_tasks)])
        self.blocks = nn.ModuleList([ClassAttentionBlock(D, heads, self.cfg.mlp_ratio) for _ in range(num_tasks)])
        self.heads = nn.ModuleList([Head(D, num_classes, run.head) for _ in range(num_tasks)])
        self.register_buffer("temperature", torch.zeros(num_tasks))             #: kept per stage
        self.register_buffer("domains", torch.tensor(0, dtype=torch.long))      #: stages with a temperature
        self.penalties.insert(0, EnergyAlign())

    # ---- forward: one stage in training, the vote at test --------------------------------------------
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

    # ---- the task hooks --------------------------------------------------------------------------------
    def begin_task(self, task: int, train_set: Any) -> None:
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
            logits = torch.cat([self.all_logits(x, task + 1) for x, _ in batches(self, train_set)])
            temp = choose_temperature(logits, task, self.cfg.temperatures)
        self.temperature[task] = temp
        self.domains.fill_(task + 1)
        return {"esn": {"temperature": temp, "temperatures": self.temperature[:task + 1].tolist()}}
