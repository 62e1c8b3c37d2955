"""Seeds and determinism: same config + same seed on the same machine -> the same numbers."""

from __future__ import annotations

import os
import random
import zlib

import numpy as np
import torch


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts (run seed, task, purpose), stable across processes and machines."""
    return zlib.crc32(":".join(map(str, parts)).encode()) & 0x7FFFFFFF


def task_generator(seed: int, task: int, purpose: str) -> torch.Generator:
    """A CPU generator owned by one purpose of one task, so resuming mid-task replays the same draws."""
    return torch.Generator().manual_seed(derive_seed(seed, task, purpose))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def configure_torch(threads: int | None = None, deterministic: bool = True) -> torch.device:
    """Pick the device, set CPU threads and deterministic kernels; return the device."""
    if threads:
        torch.set_num_threads(threads)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
