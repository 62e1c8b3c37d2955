"""The fast loader: batches gathered from prepared uint8 arrays, augmented on the device.

For prepared image benchmarks (:class:`~intact.data.prepared.PreparedImages`, or a concatenation of
them as the joint baseline trains on) a batch is one fancy-index read of the memory map, a copy to
the device and one gather that does the random crop and the horizontal flip together; the float
conversion (``/255``, as ``ToTensor``) also runs on the device. Every random choice of an epoch is
drawn up front from a CPU generator seeded by (seed, task, epoch) - the :class:`EpochPlan` - so a
resumed epoch sees the same batches, and a later feature cache can key images by (task, index, flip)
(``train_batches(..., keys=True)``; ImageNet-C's random crop would add the plan's crop offsets to the key).

Any other dataset (the embedded digits benchmark) gets ``DataLoader``'s batches: a ``TensorDataset``'s are
gathered with one index per tensor (the same bits), any other dataset's come from ``DataLoader`` itself.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset, TensorDataset

from intact.data.prepared import RRC_ATTEMPTS, PreparedImages, center_offset, resample, resized_boxes
from intact.seeding import task_generator

Batch = tuple[torch.Tensor, torch.Tensor]


def steps_per_epoch(n: int, batch_size: int, drop_last: bool) -> int:
    """Optimizer steps in one epoch of ``n`` samples."""
    if drop_last and n < batch_size:
        raise ValueError(f"optim.drop_last: the task has {n} training images, fewer than one batch of "
                         f"{batch_size}, so no step would be taken; lower optim.batch_size or set drop_last: false")
    return n // batch_size if drop_last else math.ceil(n / batch_size)


def epoch_order(seed: int, task: int, epoch: int, n: int) -> torch.Tensor:
    """The epoch's sample order: a pure function of (seed, task, epoch)."""
    return torch.randperm(n, generator=task_generator(seed, task, f"epoch{epoch}"))


@dataclass(frozen=True)
class EpochPlan:
    """Order and augmentation of one epoch: ``order[k]`` is the k-th sample, ``flip[k]`` its flip, and
    ``top[k]``/``left[k]`` in [0, 1) place its crop (offset = floor(u * (S - size + 1)) for prepared side S);
    ``resized[k]`` (``optim.train_crop: random_resized``) its RandomResizedCrop draws
    (:func:`~intact.data.prepared.resized_boxes`)."""

    order: torch.Tensor
    flip: torch.Tensor
    top: torch.Tensor
    left: torch.Tensor
    resized: torch.Tensor | None = None

    @classmethod
    def draw(cls, seed: int, task: int, epoch: int, n: int, random_resized: bool = False) -> EpochPlan:
        # a generator of its own: the augmentation draws never shift the order's (digits stays bit-identical)
        g = task_generator(seed, task, f"augment{epoch}")
        flip = torch.rand(n, generator=g) < 0.5
        top, left = torch.rand(n, generator=g, dtype=torch.float64), torch.rand(n, generator=g, dtype=torch.float64)
        # drawn after the others, so the benchmark's own crop and flip are the same with or without them
        resized = torch.rand((n, RRC_ATTEMPTS, 4), generator=g, dtype=torch.float64) if random_resized else None
        return cls(epoch_order(seed, task, epoch, n), flip, top, left, resized)


def _parts(data: Dataset) -> list[PreparedImages] | None:
    """The prepared splits behind ``data`` (itself, or the parts of a ConcatDataset), else None."""
    if isinstance(data, PreparedImages):
        return [data]
    if isinstance(data, ConcatDataset) and all(isinstance(d, PreparedImages) for d in data.datasets):
        return list(data.datasets)
    return None


Group = tuple[np.ndarray, PreparedImages, torch.Tensor, torch.Tensor]


def _gather(parts: list[PreparedImages], index: np.ndarray) -> list[Group]:
    """Global indices over concatenated ``parts`` -> per part: (positions in the batch, part, pixels, labels)."""
    if len(parts) == 1:
        return [(np.arange(len(index)), parts[0], *parts[0].gather(index))]
    bounds = np.cumsum([0] + [len(p) for p in parts])
    which = np.searchsorted(bounds, index, side="right") - 1
    out = []
    for k in np.unique(which):
        sel = np.flatnonzero(which == k)
        out.append((sel, parts[k], *parts[k].gather(index[sel] - bounds[k])))
    return out


def crop_flip(pixels: torch.Tensor, top: torch.Tensor, left: torch.Tensor, flip: torch.Tensor,
              size: int) -> torch.Tensor:
    """(B, S, S, 3) uint8 -> (B, 3, size, size) float in [0, 1]: per-image crop at (top, left), then flip.

    The pixel work stays in uint8 until the last step; ``/255`` in float32 is what ``ToTensor`` does.
    """
    dev = pixels.device
    if pixels.shape[1] == size:  # nothing to crop (every image prepared at the input size): flip only
        out = pixels.permute(0, 3, 1, 2).contiguous()
        if bool(flip.any()):
            out = torch.where(flip.to(dev).view(-1, 1, 1, 1), out.flip(3), out)
    else:
        ar = torch.arange(size, device=dev)
        rows = top.to(dev)[:, None] + ar
        cols = left.to(dev)[:, None] + torch.where(flip.to(dev)[:, None], size - 1 - ar, ar)
        b = torch.arange(len(pixels), device=dev)[:, None, None]
        out = pixels[b, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2).contiguous()
    return out.float().div_(255)


def _assemble(groups: list[Group], plan: EpochPlan | None, sl: slice | None, device: torch.device | str) -> Batch:
    """Move each group to ``device`` and crop/flip it there: the batch ``sl`` of the epoch's ``plan``, or the
    deterministic view when ``plan`` is None (the centre crop, or the ``test_resize`` window, unflipped)."""
    n = sum(len(sel) for sel, *_ in groups)
    size = groups[0][1].size
    x = torch.empty((n, 3, size, size), device=device)
    y = torch.empty(n, dtype=torch.int64, device=device)
    for sel, part, pixels, labels in groups:
        rows = None if plan is None else torch.from_numpy(sel + sl.start)   # the images' positions in the epoch
        x[torch.from_numpy(sel).to(device)] = _view(part, pixels.to(device, non_blocking=True), rows, plan)
        y[torch.from_numpy(sel).to(device)] = labels.to(device, non_blocking=True)
    return x, y


def _view(part: PreparedImages, pixels: torch.Tensor, rows: torch.Tensor | None,
          plan: EpochPlan | None) -> torch.Tensor:
    """One group's images as the run reads them: the epoch plan's ``rows`` (the batch's positions in the epoch),
    or the deterministic view where ``plan`` is None."""
    size, prepared, k = part.size, part.prepared_size, len(pixels)
    if plan is None:
        window = part.center_window()
        if window is not None:   # test_resize: the centre window resized to the input side
            side = torch.full((k,), window, dtype=torch.float64)
            at = (prepared - side) / 2
            return resample(pixels, at, at, side, side, torch.zeros(k, dtype=torch.bool), size, crop=False)
        at = torch.full((k,), center_offset(prepared, size))
        return crop_flip(pixels, at, at, torch.zeros(k, dtype=torch.bool), size)
    flip = plan.flip[rows]
    if part.random_resized:
        return resample(pixels, *resized_boxes(plan.resized[rows], prepared), flip, size)
    span = prepared - size + 1
    return crop_flip(pixels, (plan.top[rows] * span).long(), (plan.left[rows] * span).long(), flip, size)


def _prefetched(loads: Iterator, fn) -> Iterator:
    """``fn(item)`` for each item, computing the next one on a thread while the caller works."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        items = iter(loads)
        nxt = next(items, None)
        pending = pool.submit(fn, nxt) if nxt is not None else None
        while pending is not None:
            result = pending.result()
            nxt = next(items, None)
            pending = pool.submit(fn, nxt) if nxt is not None else None
            yield result


def train_batches(data: Dataset, *, seed: int, task: int, epoch: int, batch_size: int, first: int = 0,
                  device: torch.device | str = "cpu", drop_last: bool = False, keys: bool = False) -> Iterator[tuple]:
    """Batches ``first, first+1, ...`` of the epoch, on ``device``; prepared images are flipped / cropped there.

    ``keys=True`` also yields each image's dataset index and flip (CPU tensors): what a feature cache of
    (task, index, flip) needs to look a batch up. Yields ``(x, y)`` or ``(x, y, index, flip)``.
    """
    n = len(data)
    stop = steps_per_epoch(n, batch_size, drop_last) * batch_size if drop_last else n
    parts = _parts(data)
    if parts is None:  # not prepared images (digits): DataLoader's batches, bit for bit
        order = epoch_order(seed, task, epoch, n)[first * batch_size:stop]
        if not len(order):   # (split would give one empty batch)
            return
        for index, (x, y) in zip(order.split(batch_size), _rows(data, order, batch_size)):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            yield (x, y, index, torch.zeros(len(index), dtype=torch.bool)) if keys else (x, y)
        return
    plan = EpochPlan.draw(seed, task, epoch, n, any(p.random_resized for p in parts))
    augment = all(p.augment for p in parts)
    slices = [slice(s, min(s + batch_size, stop)) for s in range(first * batch_size, stop, batch_size)]
    for sl, groups in _prefetched(slices, lambda sl: (sl, _gather(parts, plan.order[sl].numpy()))):
        x, y = _assemble(groups, plan if augment else None, sl, device)
        flip = plan.flip[sl] if augment else torch.zeros(len(y), dtype=torch.bool)
        yield (x, y, plan.order[sl], flip) if keys else (x, y)


def _rows(data: Dataset, order: torch.Tensor, batch_size: int) -> Iterator[Batch]:
    """The rows ``order`` of a dataset that holds no prepared images, ``batch_size`` at a time. A TensorDataset of
    (images, labels) is gathered with one index per tensor: what DataLoader's collation of its items gives,
    bit for bit (a fresh tensor each), without a Python call per image (those calls were ~4 % of the
    in-process method tests' time under cProfile). Any other dataset goes through DataLoader as before."""
    if isinstance(data, TensorDataset) and len(data.tensors) == 2:
        x, y = data.tensors
        return ((x[r], y[r]) for r in order.split(batch_size))
    # a generator of its own: DataLoader's iterator draws a seed when it starts (an epoch, a resumed epoch), which
    # would move the global RNG a method may draw from after the checkpoint restored it (exact resume)
    return iter(DataLoader(Subset(data, order.tolist()), batch_size=batch_size, shuffle=False,
                           generator=torch.Generator()))


def eval_batches(data: Dataset, batch_size: int, device: torch.device | str = "cpu") -> Iterator[Batch]:
    """Batches of ``data`` in order, no augmentation (evaluation, the hypercube pass, EWC's Fisher)."""
    parts = _parts(data)
    n = len(data)
    if parts is None:
        for x, y in _rows(data, torch.arange(n), batch_size):
            yield x.to(device), y.to(device)
        return
    for groups in _prefetched(range(0, n, batch_size), lambda s: _gather(parts, np.arange(s, min(s + batch_size, n)))):
        yield _assemble(groups, None, None, device)
