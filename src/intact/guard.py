"""Divergence guard of a training job: a non-finite loss term, gradient or parameter stops the job loudly.

The default policy (``optim.on_nonfinite: stop``) costs no host-device synchronisation per step: every
step folds ``isfinite`` checks of the loss terms, the total loss, the gradients and the parameters (in
that order) into two device tensors - the global step and the name of the first non-finite value - and
the host reads them once per check interval and before every checkpoint. The job then raises
:class:`NonFiniteError` naming the run, task, epoch, step and that first value; the last good epoch
checkpoint stays on disk and no ``state.safetensors`` / ``train.json`` is written.

``optim.on_nonfinite: skip_batch`` instead checks each batch before the optimizer step (one sync per
step) and skips a batch whose terms or gradients are not finite; the job still fails once more than
``optim.max_skipped_fraction`` of the task's steps were skipped. Skipped batches go to ``train.json``.
A skipped batch leaves no trace: its forward pass already updated BatchNorm's running statistics, so the
guard snapshots the method's buffers before each forward (:meth:`DivergenceGuard.snapshot`, skip_batch
only) and restores them when it skips the batch. The running statistics are checked too (after the
gradients, before the parameters): a batch with a finite loss whose variance overflows to inf in a
running statistic is skipped (and restored) like a non-finite loss, or stops the job under ``stop``.

Whatever the policy, :func:`check_saved` refuses a task result with any non-finite floating tensor it
would save - parameters, buffers (BatchNorm statistics, EWC's Fisher) and hypercubes.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

import torch

#: optimizer steps between two host reads of the guard (and of the progress bar's loss)
CHECK_EVERY = 25
#: at most this many skipped (epoch, step) positions are listed in train.json (all are counted)
MAX_LISTED = 100


class NonFiniteError(RuntimeError):
    """Training produced a NaN/Inf; the message says where and what was kept."""


class DivergenceGuard:
    """Watches one task's training; ``observe`` after every optimizer step, ``check`` at intervals."""

    def __init__(self, run_name: str, task: int, epochs: int, steps_per_epoch: int,
                 params: Sequence[tuple[str, torch.Tensor]], device: torch.device, *,
                 policy: str = "stop", max_skipped_fraction: float = 0.0, start_step: int = 0,
                 buffers: Sequence[tuple[str, torch.Tensor]] = ()) -> None:
        if policy not in ("stop", "skip_batch"):
            raise ValueError(f"optim.on_nonfinite = {policy!r}: expected stop or skip_batch")
        self.run_name, self.task, self.epochs, self.steps_per_epoch = run_name, task, epochs, steps_per_epoch
        self.params = list(params)
        self.policy = policy
        self.max_skipped = int(max_skipped_fraction * epochs * steps_per_epoch)
        self.skipped: list[list[int]] = []          #: (epoch, step), 0-based, of every skipped batch
        self.skipped_count = 0
        self.device = device
        # [global step of the first non-finite value or -1, index of its name in self.names]
        self.first = torch.tensor([-1, -1], dtype=torch.int64, device=device)
        self.gstep = torch.tensor(start_step, dtype=torch.int64, device=device)
        self.names: list[str] = []
        self._index: dict[tuple[str, ...], torch.Tensor] = {}
        #: the buffers a forward pass may update (BatchNorm statistics), and their copy before this batch
        self.buffers = [b for _, b in buffers]
        #: the running statistics, checked after each forward pass like the loss terms
        self.statistics = [(n, b) for n, b in buffers
                           if b.is_floating_point() and n.rsplit(".", 1)[-1] in ("running_mean", "running_var")]
        self._before: list[torch.Tensor] = []

    @property
    def skips(self) -> bool:
        return self.policy == "skip_batch"

    # ---- device side (no synchronisation) ----------------------------------------------------------
    def _checked(self, loss: torch.Tensor, terms: dict[str, torch.Tensor],
                 with_params: bool) -> tuple[tuple[str, ...], list[torch.Tensor]]:
        names = [f"loss term '{k}'" for k in terms] + ["total loss"]
        values = [*terms.values(), loss.detach()]
        for n, p in self.params:
            if p.grad is not None:
                names.append(f"gradient of '{n}'")
                values.append(p.grad)
        for n, b in self.statistics:
            names.append(f"buffer '{n}'")
            values.append(b)
        if with_params:
            for n, p in self.params:
                names.append(f"parameter '{n}'")
                values.append(p.detach())
        if any(v.numel() == 0 for v in values):  # an empty tensor (ESN's length-0 prompt) is finite; no max |x|
            kept = [(n, v) for n, v in zip(names, values) if v.numel()]
            names, values = [n for n, _ in kept], [v for _, v in kept]
        return tuple(names), values

    def _finite(self, values: Sequence[torch.Tensor]) -> torch.Tensor:
        # max |x| of each tensor is finite exactly when all its elements are (no overflow, NaN propagates);
        # one fused multi-tensor kernel on CUDA instead of two small kernels per tensor
        return torch.isfinite(torch.stack(torch._foreach_norm(list(values), float("inf"), dtype=torch.float32)))

    def observe(self, loss: torch.Tensor, terms: dict[str, torch.Tensor], with_terms: bool = True) -> None:
        """Record the first non-finite value of this step (after ``optimizer.step``), on the device."""
        names, values = self._checked(loss, terms, with_params=True)
        if not with_terms:  # skip_batch checked them already (before the step)
            keep = [i for i, n in enumerate(names) if n.startswith("parameter ")]
            names, values = tuple(names[i] for i in keep), [values[i] for i in keep]
        ok = self._finite(values)
        index = self._index.get(names)
        if index is None:
            for n in names:
                if n not in self.names:
                    self.names.append(n)
            index = self._index[names] = torch.tensor([self.names.index(n) for n in names], device=self.device)
        new = (self.first[0] < 0) & ~ok.all()
        # argmin: the first False; index_select, not index[tensor], which may read the index on the host
        here = torch.stack([self.gstep, index.index_select(0, torch.argmin(ok.to(torch.uint8)).view(1))[0]])
        self.first = torch.where(new, here, self.first)
        self.gstep += 1

    def snapshot(self) -> None:
        """skip_batch only: copy the buffers before this batch's forward pass, so that a skip can undo it."""
        if self.skips:
            self._before = [b.detach().clone() for b in self.buffers]

    @torch.no_grad()
    def _restore(self) -> None:
        for b, saved in zip(self.buffers, self._before):
            b.copy_(saved)

    # ---- host side -----------------------------------------------------------------------------
    def batch_ok(self, loss: torch.Tensor, terms: dict[str, torch.Tensor], epoch: int, step: int) -> bool:
        """skip_batch only: are this batch's terms, loss, gradients and running statistics finite? Counts a skipped
        batch and raises once more than the allowed fraction of the task's steps was skipped. One sync per step."""
        names, values = self._checked(loss, terms, with_params=False)
        ok = self._finite(values)
        if bool(ok.all()):
            return True
        self._restore()  # the skipped forward pass updated the running statistics: undo it
        self.skipped_count += 1
        if len(self.skipped) < MAX_LISTED:
            self.skipped.append([epoch, step])
        if self.skipped_count > self.max_skipped:
            first = names[int(torch.argmin(ok.to(torch.uint8)))]
            raise NonFiniteError(
                f"{self._where(epoch, step)}: {self.skipped_count} batches with a non-finite loss, gradient or "
                "statistic "
                f"(this one: {first}) - more than optim.max_skipped_fraction allows ({self.max_skipped} of "
                f"{self.epochs * self.steps_per_epoch} steps). Training stopped; no state.safetensors or train.json "
                "was written. Lower the lambdas or learning rates.")
        return False

    def check(self, checkpoint_note: str) -> None:
        """Raise :class:`NonFiniteError` if any step so far was non-finite (one sync)."""
        step, name = self.first.tolist()
        if step < 0:
            return
        epoch, in_epoch = divmod(step, self.steps_per_epoch)
        raise NonFiniteError(
            f"{self._where(epoch, in_epoch)}: the {self.names[name]} went non-finite (NaN or Inf) first. "
            f"Training stopped; {checkpoint_note}; no state.safetensors or train.json was written for this task. "
            "Lower the lambdas or learning rates, or set optim.on_nonfinite: skip_batch to skip such batches.")

    def _where(self, epoch: int, step: int) -> str:
        return (f"run {self.run_name}, task {self.task}, epoch {epoch + 1}/{self.epochs}, "
                f"step {step + 1}/{self.steps_per_epoch}")

    # ---- persistence ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"skipped": list(self.skipped), "skipped_count": self.skipped_count}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.skipped = [list(s) for s in state.get("skipped", [])]
        self.skipped_count = int(state.get("skipped_count", 0))

    def summary(self) -> dict[str, Any]:
        """What ``train.json`` records."""
        return {"policy": self.policy, "skipped_batches": self.skipped_count, "skipped_at": self.skipped,
                "max_skipped": self.max_skipped}


def nonfinite(value: Any) -> bool:
    """Whether ``value`` is a floating tensor holding NaN or Inf (anything else is not)."""
    return torch.is_tensor(value) and value.is_floating_point() and not bool(torch.isfinite(value).all())


def check_saved(where: str, task: int, tensors: Mapping[str, torch.Tensor], hypercubes: Mapping[str, Any]) -> None:
    """Raise :class:`NonFiniteError` naming the first non-finite floating tensor among what a task saves:
    the method's state (parameters and buffers: BatchNorm statistics, EWC's Fisher) and the hypercubes."""
    named = [(f"buffer or parameter {k!r}", v) for k, v in tensors.items()]
    named += [(f"hypercube {k!r} ({side} bound)",
               getattr(c, side)) for k, c in hypercubes.items() for side in ("lower", "upper")]
    for name, value in named:
        if nonfinite(value):
            raise NonFiniteError(
                f"run {where}, task {task}: the {name} to be saved is not finite (NaN or Inf). Training stopped; "
                "no state.safetensors or train.json was written for this task. Lower the lambdas or learning rates.")
