"""What the paper's efficiency table reports, measured for one trained task (recorded in ``train.json``):
parameters, seconds per training and per inference batch, and the device they were measured on.

Timing uses ``time.perf_counter`` around synchronised device work, after the task's state is saved, in
eval mode without gradients: measuring changes no stored result.
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from intact.data.loader import eval_batches
from intact.methods.shared.base import num_trainable_parameters

#: submodules that are copies of other parameters (the L_Feat teacher), not part of the model
_COPIES = ("teacher.",)


def parameter_counts(method: nn.Module, trainable: int) -> dict[str, int]:
    """Total parameters of the model (frozen backbone included, snapshot copies excluded) and trainable ones."""
    seen: set[int] = set()
    total = 0
    for name, p in method.named_parameters(remove_duplicate=False):
        if name.startswith(_COPIES) or id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
    return {"total_parameters": total, "trainable_parameters": trainable}


def peak_memory_bytes(device: torch.device) -> int:
    """This process's peak memory: on a GPU what CUDA allocated; else the peak resident set of this process image
    (Linux's ``VmHWM``: ``ru_maxrss`` also keeps what the process it was forked from, Snakemake, held before its
    ``exec``), else ``ru_maxrss`` (kilobytes, but bytes on macOS)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) * 1024
    except (OSError, StopIteration):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss if sys.platform == "darwin" else rss * 1024


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA runs asynchronously), so a timer read after it counts that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def inference_seconds_per_batch(method: Any, data: Dataset, batch_size: int, device: torch.device,
                                max_batches: int = 3) -> float:
    """Mean seconds of ``method.predict`` on one batch of ``data`` (eval mode; the first batch warms up and
    is not timed). Up to ``max_batches`` timed batches: each is a live prediction (query + prompted pass), so
    10 of them cost a default-run job as much as a seventh of its training (issue 18's profile); 3 keep the
    mean of a cost that the paper's table averages over tasks and seeds anyway."""
    was_training = method.training
    method.eval()
    times, first = [], None
    for i, (x, _) in enumerate(eval_batches(data, batch_size, device)):
        if i > max_batches:
            break
        if len(x) < batch_size and i > 0:  # a last partial batch would bias the per-batch time
            break
        first = x if i == 0 else first
        elapsed = _timed(method, x, device)
        if i > 0:
            times.append(elapsed)
    if not times and first is not None:  # one batch (and a partial one): timed again, warm (it gave 0.0 s)
        times.append(_timed(method, first, device))
    method.train(was_training)
    return float(sum(times) / len(times))


def _timed(method: Any, x: torch.Tensor, device: torch.device) -> float:
    """Seconds of ``method.predict(x)``, the device synchronised before and after."""
    synchronize(device)
    t0 = time.perf_counter()
    method.predict(x)
    synchronize(device)
    return time.perf_counter() - t0


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def efficiency_record(method: Any, data: Dataset, batch_size: int, device: torch.device, steps: int) -> dict[str, Any]:
    """The ``train.json`` fields of the efficiency table (``steps``: optimizer steps the task took)."""
    return {
        **parameter_counts(method, num_trainable_parameters(method)),
        "train_batches": steps,
        "inference_batch_seconds": inference_seconds_per_batch(method, data, batch_size, device),
        "inference_batch_size": batch_size,
        "device": device_name(device),
    }
