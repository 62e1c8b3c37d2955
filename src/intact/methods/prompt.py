"""Shared machinery of prompt-based methods: query -> prompt pool -> prompted [CLS] -> head.

Subclasses build the pool (CODA-Prompt, L2P, DualPrompt, ...). This class adds what every prompt
method gets for free: cumulative hypercubes of the head's inputs after each task (a diagnostic for
plain methods, the protected region for ``+intact``), the measured drift certificate, and - when the
run name carries ``+intact`` - the four InTAct terms.
"""

from __future__ import annotations

import copy
from abc import abstractmethod
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from intact.config import IntactConfig, RunConfig
from intact.data.loader import eval_batches
from intact.methods.base import ContinualMethod
from intact.models.backbone import FrozenViT
from intact.models.heads import Head
from intact.models.prefix import Prefix
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.intact import Anchor, head_drift_certificate, intact_terms, snapshot_linears
from intact.seeding import task_generator


class PromptMethod(ContinualMethod):
    """A prompt pool + shared head on a frozen ViT, optionally regularised by InTAct."""

    def __init__(self, run: RunConfig, backbone: FrozenViT, num_classes: int, num_tasks: int):
        super().__init__(run, backbone, num_classes, num_tasks)
        self.pool = self.build_pool(backbone.embed_dim, num_tasks)
        self.head = Head(backbone.embed_dim, num_classes, run.head)
        self.intact: IntactConfig | None = run.intact
        # hypercubes are kept for every prompt method; plain methods use the default percentile
        self.alpha = (run.intact or IntactConfig()).percentile
        self.percentile_method = (run.intact or IntactConfig()).percentile_method
        self.anchor: Anchor | None = None
        self.teacher: nn.Module | None = None
        #: the cumulative hypercubes on the model's device, moved once per task (not once per batch)
        self.protected: dict[str, Hypercube] = {}

    @abstractmethod
    def build_pool(self, embed_dim: int, num_tasks: int) -> nn.Module:
        """The prompt pool: ``pool(query) -> (prefix, auxiliary loss)``, with ``pool.begin_task``."""

    def check_layers(self, key: str, layers: Sequence[int]) -> None:
        """Refuse prompt layers past the backbone's last block, naming the config key."""
        if layers and max(layers) >= self.backbone.depth:
            raise ValueError(f"{key} = {list(layers)}: the backbone has only {self.backbone.depth} blocks")

    # ---- forward ------------------------------------------------------------------------------
    def query(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.backbone.query(x)

    def prompt(self, pool: nn.Module, q: torch.Tensor) -> tuple[Prefix, torch.Tensor]:
        return pool(q)

    def features(self, x: torch.Tensor, q: torch.Tensor, pool: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompted [CLS] feature and the pool's auxiliary loss."""
        prefix, aux = self.prompt(pool if pool is not None else self.pool, q)
        return self.backbone(x, prefix), aux

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        z, _ = self.features(x, self.query(x))
        return self.head(z)

    # ---- hooks ----------------------------------------------------------------------------------
    def begin_task(self, task: int, train_set: Dataset) -> None:
        super().begin_task(task, train_set)
        if task > 0:
            self.anchor = snapshot_linears(self.head.linears())
            if self.intact is not None and self.intact.lambda_feat > 0:
                # the teacher: the previous task's prompts on the same frozen backbone
                self.teacher = copy.deepcopy(self.pool).eval().requires_grad_(False)
        self.pool.begin_task(task, task_generator(self.run.seed, task, "prompts"))
        device = next(self.head.parameters()).device
        self.protected = {k: v.to(device) for k, v in self.hypercubes.items()}

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        q = self.query(x)
        z, aux = self.features(x, q)
        logits, tracked = self.head.forward_tracked(z)
        ce = F.cross_entropy(logits, y)
        terms: dict[str, torch.Tensor] = {"ce": ce}
        # the reference code counts CE twice whenever InTAct is on (kept only behind its switch)
        total = 2 * ce if (self.intact is not None and self.intact.double_ce) else ce
        if aux.requires_grad or aux.item() != 0.0:
            terms["aux"] = aux
            total = total + aux
        for name, value in self.extra_terms(x, q, logits).items():
            terms[name] = value
            total = total + value
        if self.intact is not None:
            z_teacher = None
            if self.teacher is not None and self.task > 0:
                with torch.no_grad():
                    z_teacher, _ = self.features(x, q, self.teacher)
            reg = intact_terms(self.intact, self.task, self.head.linears(), tracked, self.anchor, self.protected, z, z_teacher)
            for name, value in reg.items():
                terms[name] = value
                if name != "feat_gate":
                    total = total + value
        terms["acc"] = (logits.argmax(1) == y).float().mean()
        return total, {k: v.detach() for k, v in terms.items()}

    def extra_terms(self, x: torch.Tensor, q: torch.Tensor, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        """A method's own loss terms (EWC, LwF, ...), each added to the total; none by default."""
        return {}

    @torch.no_grad()
    def tracked_activations(self, data: Dataset, batch_size: int = 512) -> dict[str, torch.Tensor]:
        """Inputs of every head Linear over ``data`` (a final inference pass, eval mode)."""
        was_training = self.training
        self.eval()
        device = next(self.head.parameters()).device
        chunks: dict[str, list[torch.Tensor]] = {}
        for x, _ in eval_batches(data, batch_size, device):
            z, _ = self.features(x, self.query(x))
            _, tracked = self.head.forward_tracked(z)
            for name, h in tracked.items():
                chunks.setdefault(name, []).append(h.float().cpu())
        self.train(was_training)
        return {k: torch.cat(v) for k, v in chunks.items()}

    def end_task(self, task: int, train_set: Dataset) -> dict[str, Any]:
        """Update the cumulative hypercubes from this task's training data; measure the certificate."""
        acts = self.tracked_activations(train_set, self.run.optim.eval_batch_size)
        info: dict[str, Any] = {"hypercube": {}, "inside_previous": {}}
        if task > 0 and self.anchor is not None and "fc0" in self.protected:
            # the anchor and the protected box already live on the head's device (begin_task)
            cube = self.protected["fc0"]
            info.update(head_drift_certificate(self.head.linears(), self.anchor, cube, self.run.head.negative_slope))
            info["sampled_drift"] = self._sampled_drift(cube)
        new_cubes = {}
        for name, h in acts.items():
            task_cube = Hypercube.from_activations(h, self.alpha, self.percentile_method)
            previous = self.hypercubes.get(name)
            if previous is not None:
                # how much of this task's data already lay in the protected region
                info["inside_previous"][name] = {
                    "samples": float(previous.contains(h).float().mean()),
                    "coordinates": previous.inside_fraction(h),
                }
            new_cubes[name] = task_cube.union(previous)
            info["hypercube"][name] = {"task": task_cube.summary(), "cumulative": new_cubes[name].summary()}
        self.hypercubes = new_cubes
        return info

    @torch.no_grad()
    def _sampled_drift(self, cube: Hypercube, n: int = 4096) -> float:
        """Largest |logit drift| seen at points drawn in the box: an empirical check of the certificate."""
        old = copy.deepcopy(self.head)
        for name, layer in old.linears():
            layer.weight.copy_(self.anchor[name][0])
            layer.bias.copy_(self.anchor[name][1])
        z = cube.sample(n, torch.Generator().manual_seed(0)).to(cube.lower.device)
        return float((self.head(z) - old(z)).abs().max())

    def param_groups(self) -> list[dict[str, Any]]:
        o = self.run.optim
        return [
            {"params": [p for p in self.head.parameters() if p.requires_grad], "lr": o.lr_head, "name": "head"},
            {"params": [p for p in self.pool.parameters() if p.requires_grad], "lr": o.lr_prompt, "name": "prompts"},
        ]
