"""Seeds and determinism: same config + same seed on the same machine -> the same numbers."""

from __future__ import annotations

import os
import random
import zlib
from typing import Any
from collections.abc import Callable

import numpy as np
import torch


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts (run seed, task, purpose), stable across processes and machines."""
    return zlib.crc32(":".join(map(str, parts)).encode()) & 0x7FFFFFFF


def task_generator(seed: int, task: int, purpose: str) -> torch.Generator:
    """A CPU generator owned by one purpose of one task, so resuming mid-task replays the same draws."""
    return torch.Generator().manual_seed(derive_seed(seed, task, purpose))


def init_on_cpu_(tensor: torch.Tensor, init: Callable[..., Any], generator: torch.Generator, *args: Any,
                 **kwargs: Any) -> None:
    """``init(tensor, *args, generator=generator, **kwargs)`` (an ``nn.init`` function) drawn into a new CPU tensor,
    where the task generator lives, then copied into ``tensor``: a run starts from the same values on every device.
    (In place, a CPU generator cannot draw into a CUDA tensor: torch refuses it, "Expected a 'cuda' device type for
    generator but found 'cpu'".) ``tests/test_devices.py`` checks that no method draws in place into its own tensors."""
    with torch.no_grad():
        drawn = torch.empty(tensor.shape, dtype=tensor.dtype)
        init(drawn, *args, generator=generator, **kwargs)
        tensor.copy_(drawn)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """The global generators a method may draw from - torch's (CPU, and CUDA's where there is one), Python's and
    NumPy's - as plain values and tensors (a checkpoint loads them with ``weights_only``)."""
    _, keys, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "python": random.getstate(),
            "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                      "cached_gaussian": float(cached)}}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (a state without some generator leaves that one as it is)."""
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        n = state["numpy"]
        np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                             n["cached_gaussian"]))


def configure_torch(threads: int | None = None, deterministic: bool = True) -> torch.device:
    """Pick the device, set CPU threads and deterministic kernels; return the device."""
    if threads:
        torch.set_num_threads(threads)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
