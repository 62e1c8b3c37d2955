"""The penalties composed around a method's loss: InTAct, EWC and LwF, each a :class:`Penalty` with
``begin_task`` / ``terms`` / ``end_task`` hooks.

A method's declaration names its penalties (``Method(penalties=("ewc",))``) and :func:`attach_penalties`
builds them from the method's settings; InTAct's (:func:`watch_layers`: :class:`IntactPenalty` with ``+intact``,
else the :class:`HypercubeRecorder` of the hypercubes alone) is always last, so the loss sums CE, the auxiliary
loss, the method's own penalty, then InTAct's terms.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.utils.data import Dataset

from intact.data.loader import eval_batches
from intact.methods.shared.base import Batch, ContinualMethod, Penalty, batches
from intact.regularizers.ewc import empirical_fisher, ewc_penalty
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.lwf import distillation_loss
from intact.regularizers.regularizer import HypercubeTracker, IntactRegularizer, frozen_copy
from intact.settings import IntactConfig


class HypercubeRecorder(Penalty):
    """The hypercubes and the certificate of each task, kept on the method's prediction head (InTAct's books,
    :class:`HypercubeTracker`): what a method without ``+intact`` records, adding no term to its loss.

    ``predicting``: a context in which the method's ``predict`` computes with the watched layers, yielding the module
    that holds them (default: the tracker's own model). A method that trains one head and predicts with another of the
    same layers (an EMA copy) yields that one, or swaps its weights in: its copy becomes the anchors, and the
    hypercubes and the certificate are those of the head that predicts.
    """

    reads_hypercube_data = True

    def __init__(self, tracker: HypercubeTracker,
                 predicting: Callable[[], AbstractContextManager[nn.Module]] | None = None):
        self.tracker = tracker
        self.predicting = predicting

    @property
    def teacher(self) -> nn.Module | None:
        """InTAct's L_Feat teacher of the current task (the previous task's frozen copy); None without the terms."""
        return None

    @contextmanager
    def _predicting_head(self) -> Iterator[None]:
        with self.predicting() if self.predicting is not None else nullcontext(self.tracker.model) as head:
            with self.tracker.watching(head):
                yield

    def begin_task(self, method: ContinualMethod, task: int, train_set: Dataset) -> None:
        # the anchors (and the teacher) are the previous task's model, before the method moves on: the anchors are
        # the head it predicted with, the one the certificate is about
        with self._predicting_head():
            self.tracker.begin_task(task)

    def end_task(self, method: ContinualMethod, task: int, train_set: Dataset) -> dict[str, Any]:
        """Measure the certificate and update the cumulative hypercubes from a final pass over ``train_set`` (the
        data of ``intact.hypercube_source``: the training split unless a run asks for the reference code's),
        both in eval mode whatever the caller's mode (which is restored afterwards), of the head that predicts."""
        was_training = method.training
        method.eval()
        # (where the job cached the training images' queries, predict reads them in the pass: base.batches)
        try:
            with self._predicting_head():
                acts = self.tracker.collect(method.predict, (x for x, _ in batches(method, train_set)))
                # still in eval mode: the certificate's samples must neither see batch statistics nor overwrite
                # the running statistics that are saved with the task
                return self.tracker.end_task(task, acts)
        finally:
            method.train(was_training)


class IntactPenalty(HypercubeRecorder):
    """InTAct (``+intact``): the recorder's books and the four terms of :class:`IntactRegularizer`.
    ``doubles_ce``: the reference code's CE counted twice (``intact.double_ce``, for a family that honours it).
    ``teacher_feature(x, q)``: L_Feat's teacher feature of a batch (default: the tracker's, the feature layer's input
    in the teacher copy of the watched model)."""

    logged_only = frozenset({"feat_gate"})
    tracker: IntactRegularizer

    def __init__(self, reg: IntactRegularizer, doubles_ce: bool = False,
                 teacher_feature: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor] | None = None):
        super().__init__(reg)
        self.doubles_ce = doubles_ce
        self.teacher_feature = teacher_feature

    @property
    def teacher(self) -> nn.Module | None:
        return self.tracker.teacher if self.tracker.task > 0 else None

    def terms(self, method: ContinualMethod, batch: Batch) -> dict[str, torch.Tensor]:
        if self.teacher_feature is None:
            return self.tracker.penalty(teacher=lambda teacher: self.tracker.teacher_feature(batch.x))
        return self.tracker.penalty(teacher=lambda teacher: self.teacher_feature(batch.x, batch.q))


def watch_layers(intact: IntactConfig | None, model: nn.Module, layers: Sequence[str], feature: str | None = None,
                 teacher_source: nn.Module | None = None, doubles_ce: bool = False,
                 teacher_feature: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor] | None = None,
                 ) -> HypercubeRecorder:
    """InTAct's penalty on ``layers`` of ``model`` with ``+intact`` (``intact``: the run's section), else the
    recorder of their hypercubes alone: the one a family appends last to its penalties."""
    if intact is None:
        return HypercubeRecorder(HypercubeTracker(model, layers))
    reg = IntactRegularizer(intact, model, layers, feature=feature, teacher_source=teacher_source)
    return IntactPenalty(reg, doubles_ce=doubles_ce and intact.double_ce, teacher_feature=teacher_feature)


def hypercube_recorder(method: ContinualMethod) -> HypercubeRecorder | None:
    """The penalty that keeps ``method``'s hypercubes (saved and restored with each task); None: it keeps none."""
    return next((p for p in method.penalties if isinstance(p, HypercubeRecorder)), None)


def kept_hypercubes(method: ContinualMethod) -> dict[str, Hypercube]:
    """The cumulative hypercubes ``method`` carries to its next task (``hypercube.safetensors``); {} for none."""
    recorder = hypercube_recorder(method)
    return recorder.tracker.hypercubes if recorder is not None else {}


def restore_hypercubes(method: ContinualMethod, cubes: dict[str, Hypercube]) -> None:
    """Give ``method`` the hypercubes its previous task saved (refused for a method that keeps none)."""
    recorder = hypercube_recorder(method)
    if recorder is not None:
        recorder.tracker.hypercubes = cubes
    elif cubes:
        raise ValueError(f"{type(method).__name__} keeps no hypercubes")


class TensorStore(nn.Module):
    """Named buffers (saved with the trainable state); parameter names ``a.b.c`` are saved as ``a__b__c``."""

    def __init__(self, like: dict[str, torch.Tensor]):
        super().__init__()
        for name, t in like.items():
            self.register_buffer(name.replace(".", "__"), torch.zeros_like(t))

    def get(self, name: str) -> torch.Tensor:
        return getattr(self, name.replace(".", "__"))


def trainable(method: nn.Module) -> dict[str, torch.Tensor]:
    """What the optimizer trains (prompt + head, or the whole network): EWC's protected parameters."""
    return {n: p for n, p in method.named_parameters() if p.requires_grad}


class EwcPenalty(Penalty):
    """EWC (Kirkpatrick et al., 2017) in its online form: one anchor, the Fishers of all tasks summed.

    ``(lambda_ewc / 2) * sum F (theta - theta*)^2``. After task ``t``: ``F <- F + F_t`` (empirical Fisher of
    task ``t``'s training data) and ``theta* <-`` the parameters after task ``t``. Both live in the method's
    trainable state (``fisher.*``, ``anchor_params.*``), so the next task's job - a separate process -
    continues from them.
    """

    def __init__(self, method: ContinualMethod, lambda_ewc: float):
        self.lam = lambda_ewc
        params = trainable(method)
        # registered on the method: saved with its state under the names runs have always used
        method.fisher = TensorStore(params)
        method.anchor_params = TensorStore(params)

    def terms(self, method: ContinualMethod, batch: Batch) -> dict[str, torch.Tensor]:
        if method.task == 0 or self.lam == 0:
            return {}
        params = trainable(method)
        fisher = {n: method.fisher.get(n) for n in params}
        anchor = {n: method.anchor_params.get(n) for n in params}
        return {"ewc": ewc_penalty(params, anchor, fisher, self.lam)}

    def end_task(self, method: ContinualMethod, task: int, train_set: Dataset) -> dict[str, Any]:
        params = trainable(method)

        def nll(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(functional_call(method, p, (x,), strict=False), y, reduction="sum")

        device = next(iter(params.values())).device
        # per-sample gradients of the live forward: not base.batches, whose loop may hand predict a batch's
        # cached queries
        batches = eval_batches(train_set, method.run.optim.eval_batch_size, device)
        fisher_t = empirical_fisher(nll, params, batches, chunk_size=64)
        with torch.no_grad():
            for n, p in params.items():
                method.fisher.get(n).add_(fisher_t[n])
                method.anchor_params.get(n).copy_(p.detach())
        flat = torch.cat([f.flatten() for f in fisher_t.values()])
        total = torch.cat([method.fisher.get(n).flatten() for n in params])
        return {"ewc": {"task_fisher_mean": float(flat.mean()), "task_fisher_max": float(flat.max()),
                        "cumulative_fisher_mean": float(total.mean())}}


class LwfPenalty(Penalty):
    """Learning without Forgetting (Li & Hoiem, 2017): ``lambda_lwf * T^2 * KL(old || new)`` on the logits.

    Domain-incremental: old and new tasks share the output layer, so the distillation covers all its
    logits. It needs the method's view of its previous model (both families define it): ``snapshot_modules()``, the
    trainable modules whose frozen eval-mode copy, taken at ``begin_task`` from the loaded state, is the teacher (held
    outside the module tree: ``train()`` cannot reach it, it is never saved), and ``logits_with(modules, batch)``, the
    logits of ``batch`` computed with such a copy in place of the trainable modules.
    """

    def __init__(self, method: ContinualMethod, lambda_lwf: float, temperature: float):
        if temperature <= 0:
            raise ValueError(f"methods.{method.run.base}.temperature = {temperature}: expected > 0")
        self.lam, self.temperature = lambda_lwf, temperature
        self.previous: dict[str, nn.Module] | None = None

    def begin_task(self, method: ContinualMethod, task: int, train_set: Dataset) -> None:
        if task > 0:
            self.previous = {name: frozen_copy(m) for name, m in method.snapshot_modules().items()}

    def terms(self, method: ContinualMethod, batch: Batch) -> dict[str, torch.Tensor]:
        if self.previous is None or self.lam == 0:
            return {}
        with torch.no_grad():
            old_logits = method.logits_with(self.previous, batch)
        return {"lwf": self.lam * distillation_loss(batch.logits, old_logits, self.temperature)}


#: penalty name (as a declaration lists it) -> its constructor from the method and its settings
PENALTIES: dict[str, Callable[[ContinualMethod, Any], Penalty]] = {
    "ewc": lambda method, s: EwcPenalty(method, s.lambda_ewc),
    "lwf": lambda method, s: LwfPenalty(method, s.lambda_lwf, s.temperature),
}


def attach_penalties(method: ContinualMethod, names: Sequence[str], settings: Any) -> None:
    """Compose the declared penalties around ``method``'s loss, before InTAct's (which the family adds)."""
    unknown = [n for n in names if n not in PENALTIES]
    if unknown:
        raise ValueError(f"method {method.run.base!r} declares unknown penalties {unknown}; known: {sorted(PENALTIES)}")
    if "lwf" in names and not all(hasattr(method, n) for n in ("snapshot_modules", "logits_with")):
        raise TypeError(f"method {method.run.base!r} declares the penalty 'lwf', but {type(method).__name__} defines "
                        "no snapshot_modules() / logits_with() (LwF's view of the previous model: LwfPenalty)")
    method.penalties[:0] = [PENALTIES[n](method, settings) for n in names]
