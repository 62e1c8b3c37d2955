"""InTAct as a component that any method and any network can use (docs/design.md section 7).

::

    reg = IntactRegularizer(cfg, model, layers=["fc0", "fc1"], feature="fc0", teacher_source=pool)
    reg.begin_task(t)                       # anchors (a frozen copy of ``model``), teacher, boxes on device
    logits = model(...)                     # forward hooks capture every protected layer's input
    terms = reg.penalty(teacher=fn)         # {"var", "intdrift", "feat", "feat_gate", "align"}: add to the loss
    info = reg.end_task(t, reg.collect(fn, loader))   # certificate, then the cumulative hypercubes

Protected layers are Linear, Conv2d and BatchNorm (1d / 2d) modules of ``model``, named as in
``model.named_modules()`` - the one spelling used for the hypercubes, ``train.json`` and the config.
Each layer is protected against the cumulative hypercube of *its own input*. A conv input's hypercube
is per element, i.e. per (channel, position): the drift bound is then exact per output position, and
a per-channel box (the same interval at every position) would be a superset of it - wider where a
channel is quiet (image borders), so it would protect inputs no earlier task produced and cost
plasticity for nothing (``tests/test_regularizer.py`` measures both).

Two classes: :class:`HypercubeTracker` keeps the books (the layers' inputs, the cumulative hypercubes, the
anchors and the certificate after every task), which plain methods record as diagnostics without
``+intact``; :class:`IntactRegularizer` adds the teacher and the four terms. The teacher (L_Feat) and the
anchors are frozen copies held outside the method's module tree, so ``method.train()`` cannot switch them
back to training mode and they are never part of the saved state.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Any
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

from intact.removed import removal
from intact.settings import IntactConfig
from intact.regularizers.certificate import drift_certificate, width
from intact.regularizers.hypercube import Hypercube
from intact.regularizers.terms import (
    align_loss, align_loss_reference, feat_loss, feat_loss_reference, intdrift_loss, var_loss,
)
from intact.regularizers.interval import AFFINE

#: teacher feature function: the frozen teacher module -> the feature ``z^(t-1)`` of the current batch
TeacherFn = Callable[[nn.Module], torch.Tensor]


def frozen_copy(module: nn.Module) -> nn.Module:
    """A detached snapshot in eval mode (no dropout, BatchNorm on its running statistics)."""
    return copy.deepcopy(module).eval().requires_grad_(False)


@contextmanager
def batchnorm_as(copy_: nn.Module, source: nn.Module) -> Iterator[None]:
    """Within the block, every BatchNorm of ``copy_`` normalises as the same-named one of ``source`` does now:
    with the batch's statistics while ``source`` trains. The copy's running statistics are restored after,
    so the frozen snapshot (the anchors share it) never changes.

    Why: L_Feat compares the student's feature (batch statistics in training) with the teacher's; with the
    teacher on running statistics it would be nonzero for unchanged weights (docs/protocols.md, L_Feat)."""
    live = dict(source.named_modules())
    switched = [m for n, m in copy_.named_modules()
                if isinstance(m, nn.modules.batchnorm._BatchNorm) and getattr(live.get(n), "training", False)]
    saved = [[b.clone() for b in m.buffers()] for m in switched]
    for m in switched:
        m.train(True)
    try:
        yield
    finally:
        with torch.no_grad():
            for m, bufs in zip(switched, saved):
                m.train(False)
                for b, v in zip(m.buffers(), bufs):
                    b.copy_(v)


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode within the block; every submodule's own mode is restored after."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode


class HypercubeTracker:
    """The books InTAct keeps on the protected layers of ``model``: their inputs in the last forward pass, the
    cumulative hypercubes, the anchors (``model`` after the previous task) and the certificate after every task.
    Without ``+intact`` a method records these as diagnostics; :class:`IntactRegularizer` adds the terms."""

    def __init__(self, model: nn.Module, layers: Sequence[str], percentile: float | None = None,
                 percentile_method: str | None = None):
        self.model = model
        modules = dict(model.named_modules())
        for name in layers:
            if name not in modules or not isinstance(modules[name], AFFINE):
                raise ValueError(f"protected layer {name!r}: expected a Linear / Conv2d / BatchNorm module of the "
                                 "model")
            if getattr(modules[name], "running_var", True) is None:
                raise ValueError(f"protected layer {name!r}: a BatchNorm without running statistics "
                                 "(track_running_stats=False) has no eval form to bound")
        if not layers:
            raise ValueError(f"{type(self).__name__} needs at least one protected layer")
        self.layers: dict[str, nn.Module] = {n: modules[n] for n in layers}
        defaults = IntactConfig()
        self.alpha = defaults.percentile if percentile is None else percentile
        self.percentile_method = percentile_method or defaults.percentile_method
        #: cumulative hypercubes after the last finished task (saved with each task), and their device copy
        self.hypercubes: dict[str, Hypercube] = {}
        self.protected: dict[str, Hypercube] = {}
        self.previous: nn.Module | None = None     #: ``model`` after the last task: the anchors
        self.task = 0
        #: the input of every protected layer in the last forward pass of ``model`` (not of its copies)
        self.inputs: dict[str, torch.Tensor] = {}
        self._hooks = [m.register_forward_hook(self._capture(n, m)) for n, m in self.layers.items()]

    def _capture(self, name: str, module: nn.Module):
        def hook(mod: nn.Module, args: tuple, out: Any) -> None:
            if mod is module:  # deep copies (teacher, anchors) carry the hook too: ignore them
                self.inputs[name] = args[0]
        return hook

    @contextmanager
    def watching(self, model: nn.Module) -> Iterator[None]:
        """Within the block, ``model`` stands in for the watched one: a module with the same protected layers (the
        head a method predicts with where it trains another: ``HypercubeRecorder.predicting``). Its copy becomes the
        anchors (:meth:`begin_task`), its layers' inputs are captured (:meth:`collect`, the hypercubes) and the
        certificate bounds its drift (:meth:`end_task`)."""
        if model is self.model:
            yield
            return
        modules = dict(model.named_modules())
        unlike = [n for n, m in self.layers.items() if type(modules.get(n)) is not type(m)]
        if unlike:
            raise ValueError(f"{type(model).__name__} cannot stand in for the protected {type(self.model).__name__}: "
                             f"it has no layers {unlike} of the same types")
        saved = self.model, self.layers, self._hooks
        self.model, self.layers = model, {n: modules[n] for n in self.layers}
        self._hooks = [m.register_forward_hook(self._capture(n, m)) for n, m in self.layers.items()]
        try:
            yield
        finally:
            for hook in self._hooks:
                hook.remove()
            self.model, self.layers, self._hooks = saved

    # ---- the task cycle ----------------------------------------------------------------------------
    def begin_task(self, task: int) -> None:
        """Freeze the anchors as they are after the previous task; move the boxes to the model's device."""
        self.task = task
        if task > 0:
            self.previous = frozen_copy(self.model)
        device = next(self.model.parameters()).device
        self.protected = {k: v.to(device) for k, v in self.hypercubes.items()}

    @torch.no_grad()
    def collect(self, forward: Callable[[torch.Tensor], Any],
                batches: Iterable[torch.Tensor]) -> dict[str, torch.Tensor]:
        """Every protected layer's input over ``batches`` (the caller sets the device), with ``model`` in eval mode
        for the pass (running statistics used, never updated; no dropout) and the caller's modes restored after."""
        chunks: dict[str, list[torch.Tensor]] = {}
        with eval_mode(self.model):
            for x in batches:
                forward(x)
                for name in self.layers:
                    chunks.setdefault(name, []).append(self.inputs[name].float().cpu())
        self.inputs = {}
        return {k: torch.cat(v) for k, v in chunks.items()}

    def end_task(self, task: int, acts: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The certificate over the previous box, then the cumulative hypercubes with this task's inputs."""
        info: dict[str, Any] = {"hypercube": {}, "inside_previous": {}}
        first = next(iter(self.layers))
        chain = self._chain(first)
        if task > 0 and self.previous is not None and first in self.protected and chain is not None:
            info.update(self.certificate(*chain, self.protected[first]))
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

    # ---- the guarantee, measured --------------------------------------------------------------------
    def _chain(self, first: str) -> tuple[nn.Sequential, nn.Sequential] | None:
        """The layers from ``first`` to the output, now and after the previous task (Sequential models)."""
        names = [n for n, _ in self.model.named_children()]
        if not isinstance(self.model, nn.Sequential) or first not in names or self.previous is None:
            return None
        i = names.index(first)
        return nn.Sequential(*list(self.model.children())[i:]), nn.Sequential(*list(self.previous.children())[i:])

    @torch.no_grad()
    def certificate(self, new: nn.Sequential, old: nn.Sequential, cube: Hypercube,
                    samples: int = 4096) -> dict[str, Any]:
        """A sound bound of ``|f_t(z) - f_(t-1)(z)|`` for every ``z`` in ``cube`` (max over outputs of
        max(|lower|, |upper|); exact for one affine layer up to its outward rounding), and the largest drift
        seen at ``samples`` points drawn in the box (an empirical check: never above the certificate).

        Computed on eval-mode copies whatever the caller's mode (BatchNorm on its running statistics, which
        stay untouched; no dropout): :func:`intact.regularizers.certificate.drift_certificate`. For a
        multi-layer Linear / (leaky) ReLU head the interval, CROWN and optimised-slope bounds are intersected
        and their widths recorded (``certificate_interval``, ``certificate_crown``, ``certificate_alpha``)."""
        out = drift_certificate(list(new), list(old), cube.lower, cube.upper)
        lo, hi = out["lower"], out["upper"]
        extra = {f"certificate_{k}": v for k, v in out["widths"].items()} if len(out["widths"]) > 1 else {}
        z = cube.sample(samples, torch.Generator().manual_seed(0)).to(cube.lower.device)
        return {
            "certificate": width(lo, hi),
            **extra,
            "drift_lower": lo.tolist(),
            "drift_upper": hi.tolist(),
            "sampled_drift": float((out["new"](z) - out["old"](z)).abs().max()),
        }


class IntactRegularizer(HypercubeTracker):
    """The tracker's books plus InTAct's teacher and its four terms, for the protected layers of ``model``.

    ``feature`` names the layer whose *input* is L_Feat's feature (the [CLS] feature read by the head's
    first Linear; the first hidden layer's output in the MLP experiment); its hypercube gates L_Feat.
    ``teacher_source`` is the module frozen as the teacher at each task (default: ``model``).
    """

    def __init__(self, cfg: IntactConfig, model: nn.Module, layers: Sequence[str], feature: str | None = None,
                 teacher_source: nn.Module | None = None, percentile: float | None = None):
        if cfg is None:
            raise TypeError(removal("IntactRegularizer(None)"))
        if feature is not None and feature not in layers:
            raise ValueError(f"feature layer {feature!r} is not protected (protected: {list(layers)})")
        super().__init__(model, layers, cfg.percentile if percentile is None else percentile, cfg.percentile_method)
        self.cfg = cfg
        self.feature = feature
        self.teacher_source = teacher_source if teacher_source is not None else model
        self.teacher: nn.Module | None = None

    def begin_task(self, task: int) -> None:
        """The anchors and the boxes (:meth:`HypercubeTracker.begin_task`), then the teacher."""
        super().begin_task(task)
        if task > 0 and self.cfg.lambda_feat > 0:
            # the whole model as teacher: the anchors' snapshot already is it (one copy, not two)
            same = self.teacher_source is self.model
            self.teacher = self.previous if same else frozen_copy(self.teacher_source)

    def penalty(self, teacher: TeacherFn | None = None,
                z_teacher: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The active InTAct terms of the last forward pass (``feat_gate`` is a diagnostic, not a loss).

        L_Feat needs the teacher's feature of the same batch: ``z_teacher`` if given (precomputed), else
        ``teacher(self.teacher)`` without gradients.
        """
        cfg = self.cfg
        tracked = {n: self.inputs[n] for n in self.layers}
        layers = self.layers
        if cfg.protected_layers == "cls":  # the reference code protects only the layer reading the feature
            tracked = {n: h for n, h in tracked.items() if n == self.feature}
            layers = {n: m for n, m in layers.items() if n == self.feature}
        out: dict[str, torch.Tensor] = {}
        if cfg.lambda_var > 0:
            out["var"] = sum(var_loss(h.flatten(1), cfg.lambda_var, cfg.var_norm) for h in tracked.values())
        if self.task == 0:
            return out
        cubes = self.protected
        if cfg.lambda_intdrift > 0 and self.previous is not None:
            old = dict(self.previous.named_modules())
            out["intdrift"] = intdrift_loss([(n, m, old[n]) for n, m in layers.items()], cubes, cfg.lambda_intdrift)
        if cfg.lambda_feat > 0 and self.feature is not None:
            if z_teacher is None and teacher is not None and self.teacher is not None:
                with torch.no_grad():
                    z_teacher = teacher(self.teacher)
            if z_teacher is not None:
                feat = feat_loss_reference if cfg.feat_gate == "student_element" else feat_loss
                z = self.inputs[self.feature]
                out["feat"], gate = feat(z.flatten(1), z_teacher.flatten(1), cubes[self.feature].flat(),
                                         cfg.lambda_feat)
                out["feat_gate"] = gate.detach()
        if cfg.lambda_align > 0:
            out["align"] = sum(
                align_loss_reference(h.flatten(1), cubes[n].flat(), cfg.lambda_align,
                                     cfg.align_eps) if cfg.align_form == "reference"
                else align_loss(h.flatten(1), cubes[n].flat(), cfg.lambda_align, self.alpha, cfg.align_eps,
                                self.percentile_method)
                for n, h in tracked.items() if n in cubes
            )
        return out

    def teacher_feature(self, x: torch.Tensor) -> torch.Tensor:
        """The feature layer's input when the frozen teacher (a copy of ``model``) runs on ``x``; its BatchNorm
        layers use the batch's statistics exactly when the student's do (:func:`batchnorm_as`)."""
        captured: dict[str, torch.Tensor] = {}
        layer = dict(self.teacher.named_modules())[self.feature]
        # (a forward hook that returns a value replaces the layer's output: this one returns None)
        handle = layer.register_forward_hook(lambda m, args, out: captured.update(z=args[0]))
        try:
            with batchnorm_as(self.teacher, self.teacher_source):
                self.teacher(x)
        finally:
            handle.remove()
        return captured["z"]
