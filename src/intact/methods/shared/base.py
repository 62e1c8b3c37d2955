"""The method interface (Mammoth-style hooks) every continual-learning method implements, and the one
place where a batch's loss is assembled.

A training job calls, for one task: :func:`enter_task` -> :func:`batch_loss` per batch (the job owns the
optimizer) -> :func:`leave_task`. A method supplies ``forward_train`` (logits, an auxiliary loss, its query);
``batch_loss`` adds cross-entropy, the auxiliary loss and the terms of every penalty
(:mod:`intact.methods.shared.penalties`: EWC, LwF, InTAct), and the penalties' ``begin_task`` / ``end_task`` hooks
run before the method's own. Everything a later task needs is in :func:`trainable_state` (+ the hypercubes InTAct's
penalty keeps): what is trainable, decided by ``requires_grad`` - a frozen module (the backbone) is never saved, and
snapshots (teachers, anchors) live outside the module tree, in the penalties.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from intact.data.base import Benchmark
from intact.data.loader import eval_batches
from intact.methods.shared.frozen import QUERY, pass_queries, serving
from intact.settings import RunConfig


@dataclass
class Batch:
    """One training batch as the penalties see it: inputs, labels, the method's logits and its query
    (the frozen backbone's [CLS] of the clean image; None for a whole network)."""

    x: torch.Tensor
    y: torch.Tensor
    logits: torch.Tensor
    q: torch.Tensor | None = None


class Penalty:
    """A loss term composed around any method whose declaration allows it (Avalanche's plugin idea):
    hooks around a task and the terms of each batch. Subclasses: :mod:`intact.methods.shared.penalties`."""

    #: terms recorded for the logs but not added to the loss (diagnostics such as InTAct's ``feat_gate``)
    logged_only: frozenset[str] = frozenset()
    #: CE counted twice while this penalty is on (the reference code's InTAct: ``intact.double_ce``)
    doubles_ce: bool = False
    #: ``end_task`` gets the hypercube's data (``intact.hypercube_source``), not the task's training split
    reads_hypercube_data: bool = False

    def begin_task(self, method: ContinualMethod, task: int, train_set: Dataset) -> None:
        """Before the method's own preparation of ``task`` (its model is still the previous task's)."""

    def terms(self, method: ContinualMethod, batch: Batch) -> dict[str, torch.Tensor]:
        """This batch's terms, by name (each added to the loss unless in ``logged_only``)."""
        return {}

    def end_task(self, method: ContinualMethod, task: int, train_set: Dataset) -> dict[str, Any]:
        """After training on ``task``: what ``train.json`` records."""
        return {}


def frozen_prefixes(module: nn.Module) -> tuple[str, ...]:
    """``name.`` of every maximal submodule that has parameters, none of them trainable (a submodule shared
    under two names counts under the first, as in ``named_modules``)."""
    status: dict[int, tuple[bool, bool]] = {}

    def has_and_trains(m: nn.Module) -> tuple[bool, bool]:
        # bottom up, each module once: asking every module for all its parameters is quadratic in the depth,
        # and was most of the time of loading a method's state (a ViT has hundreds of modules)
        if id(m) not in status:
            flags = [p.requires_grad for p in m.parameters(recurse=False)]
            below = [has_and_trains(c) for c in m.children()]
            status[id(m)] = (bool(flags) or any(h for h, _ in below), any(flags) or any(t for _, t in below))
        return status[id(m)]

    has_and_trains(module)
    out: list[str] = []
    for name, m in module.named_modules():
        has, trains = status[id(m)]
        if name and has and not trains and not name.startswith(tuple(out)):
            out.append(name + ".")
    return tuple(out)


class ContinualMethod(nn.Module, ABC):
    """Base class: a module (a prompt pool on a frozen backbone, or a whole network) trained one task at a time.

    Its surface (docs/adding-a-method.md, "The contract"): the three hooks a method must define
    (:meth:`forward_train`, :meth:`predict`, :meth:`param_groups`); four it may (:meth:`training_data`,
    :meth:`begin_task`, :meth:`after_step`, :meth:`end_task`); and four attributes (``run``, ``cfg``, ``task``,
    ``penalties``). What the job does around them - the penalties' hooks, a batch's loss, the state saved with a
    task - is this module's functions (:func:`enter_task`, :func:`batch_loss`, :func:`leave_task`,
    :func:`trainable_state`), not the method's.
    """

    def __init__(self, run: RunConfig, settings: Any):
        super().__init__()
        self.run = run             #: the run's settings (:class:`~intact.settings.RunConfig`: seed, optim, ...)
        self.cfg = settings        #: the method's own settings (its declared dataclass, ``methods.<name>``)
        self.task = 0              #: the task being trained (set by :func:`enter_task`)
        #: composed around the loss, in the order their terms are added (see create_method)
        self.penalties: list[Penalty] = []

    # ---- the hooks a method must define ------------------------------------------------------------------
    @abstractmethod
    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Training forward pass of a batch: (logits, auxiliary loss or None, query or None)."""

    @abstractmethod
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Logits at test time (no task identity)."""

    @abstractmethod
    def param_groups(self) -> list[dict[str, Any]]:
        """Optimizer parameter groups with their learning rates."""

    # ---- the hooks a method may define -------------------------------------------------------------------
    def training_data(self, bench: Benchmark, task: int) -> Dataset:
        """The data ``task`` trains on (and ``end_task`` sees): by default the task's own training split."""
        return bench.train_set(task, self.run.eval_split)

    def begin_task(self, task: int, train_set: Dataset) -> None:
        """Prepare for ``task`` (new prompt components, ...), after the penalties' ``begin_task`` took their
        snapshots of the previous task's model; nothing by default."""

    def after_step(self) -> None:
        """Called after every optimizer step the job takes (C-Prompt's EMA head); nothing by default."""

    def end_task(self, task: int, train_set: Dataset) -> dict[str, Any]:
        """Finish ``task``, after the penalties' ``end_task`` (InTAct's hypercubes and certificate, EWC's
        Fisher); return what ``train.json`` should record beside theirs. Nothing by default."""
        return {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a module needs a forward (EWC's functional_call): the test-time prediction
        return self.predict(x)


# ---- what the job does with a method ------------------------------------------------------------------------
def enter_task(method: ContinualMethod, task: int, train_set: Dataset) -> None:
    """Prepare ``method`` for ``task``: the penalties first (snapshots of the previous task's model), then the
    method's own :meth:`~ContinualMethod.begin_task`."""
    method.task = task
    for penalty in method.penalties:
        penalty.begin_task(method, task, train_set)
    method.begin_task(task, train_set)


def batch_loss(method: ContinualMethod, x: torch.Tensor,
               y: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training loss of one batch and its named terms (detached values for logging):
    CE (twice where a penalty ``doubles_ce``) + the auxiliary loss + every penalty's terms, in that order."""
    logits, aux, q = method.forward_train(x)
    ce = F.cross_entropy(logits, y)
    terms: dict[str, torch.Tensor] = {"ce": ce}
    total = 2 * ce if any(p.doubles_ce for p in method.penalties) else ce
    # a pool without an auxiliary loss returns a constant zero (no grad): no host read needed to tell
    if aux is not None and aux.requires_grad:
        terms["aux"] = aux
        total = total + aux
    batch = Batch(x, y, logits, q)
    for penalty in method.penalties:
        for name, value in penalty.terms(method, batch).items():
            terms[name] = value
            if name not in penalty.logged_only:
                total = total + value
    terms["acc"] = (logits.argmax(1) == y).float().mean()
    return total, {k: v.detach() for k, v in terms.items()}


def leave_task(method: ContinualMethod, task: int, train_set: Dataset,
               hypercube_data: Dataset | None = None) -> dict[str, Any]:
    """Finish ``task``: the penalties' ``end_task`` (InTAct's hypercubes and certificate first, then e.g. EWC's
    Fisher), then the method's own; what ``train.json`` records. Every hook gets ``train_set`` but the hypercubes'
    (:attr:`Penalty.reads_hypercube_data`), which get ``hypercube_data`` where given."""
    info: dict[str, Any] = {}
    for penalty in reversed(method.penalties):
        data = hypercube_data if (penalty.reads_hypercube_data and hypercube_data is not None) else train_set
        info.update(penalty.end_task(method, task, data))
    info.update(method.end_task(task, train_set))
    return info


def batches(method: ContinualMethod, data: Dataset) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``data``'s ``(x, y)`` batches in order, unaugmented, at ``optim.eval_batch_size`` on ``method``'s device: a
    pass over data inside a hook (``end_task``'s over the task's data, statistics in ``begin_task``). Where the job
    cached this pass's queries, the method's query returns each batch's own inside the loop."""
    queries = pass_queries(method, data)
    device = next(itertools.chain(method.parameters(), method.buffers())).device
    start = 0
    for x, y in eval_batches(data, method.run.optim.eval_batch_size, device):
        if queries is None:
            yield x, y
            continue
        with serving(method, {QUERY: queries[start:start + len(x)].to(x.device)}):
            yield x, y
        start += len(x)


def trainable_state(method: nn.Module) -> dict[str, torch.Tensor]:
    """Everything a later task needs: the state outside frozen submodules (trainable parameters, the buffers that go
    with them: BatchNorm statistics, EWC's Fisher, a pool's task counter)."""
    frozen = frozen_prefixes(method)
    return {k: v for k, v in method.state_dict().items() if not k.startswith(frozen)}


def load_trainable_state(method: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Give ``method`` the state :func:`trainable_state` saved (refused where it does not fit)."""
    missing, unexpected = method.load_state_dict(state, strict=False)
    frozen = frozen_prefixes(method)
    missing = [k for k in missing if not k.startswith(frozen)]
    if missing or unexpected:
        raise ValueError(f"state does not fit {type(method).__name__}: missing {missing}, unexpected {unexpected}")


def num_trainable_parameters(method: ContinualMethod) -> int:
    """What the optimizer trains, counted from the method's parameter groups."""
    return sum(p.numel() for g in method.param_groups() for p in g["params"])
