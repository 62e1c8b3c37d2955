"""Where a result came from: code version, package versions, the plugins loaded, machine."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from intact.plugins import loaded_plugins

PACKAGES = ("torch", "torchvision", "timm", "numpy", "safetensors", "scikit-learn", "snakemake", "mlflow")


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The repository's HEAD commit (with '-dirty' if the tree has changes), or None outside git."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                               text=True, timeout=10)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def provenance() -> dict[str, object]:
    import torch

    return {
        "git_commit": git_commit(),
        "packages": package_versions(),
        "plugins": loaded_plugins(),
        "python": platform.python_version(),
        "host": platform.node(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({platform.machine()})",
        "torch_threads": torch.get_num_threads(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "snakemake_rule": os.environ.get("INTACT_RULE"),
    }
