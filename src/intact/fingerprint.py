"""What decides the floats of a CPU run, as a record: two machines with equal fingerprints compute the same
bits (tests/regression_run.py compares against the reference of its own; intact.testing keys its tiny
benchmark cache on it)."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from intact.hashing import stable_hash

#: CPU flags that decide which kernels MKL / oneDNN / ATen pick (the model name alone is vague in VMs)
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "asimd", "sve", "sve2")
#: environment variables that override the dispatch above
DISPATCH_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_CBWR",
                "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE")


def _cpuinfo() -> dict[str, str]:
    """The first processor's ``/proc/cpuinfo`` fields (empty where there is no such file)."""
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _build() -> dict[str, str]:
    """The BLAS / LAPACK / MKL / oneDNN of this torch build, as ``torch.__config__.show()`` names them."""
    import torch  # here: importing this module costs nothing until a fingerprint is taken

    shown = torch.__config__.show()
    out = {}
    for key in ("BLAS_INFO", "LAPACK_INFO"):
        m = re.search(rf"{key}=([^,\s]+)", shown)
        out[key.lower()] = m.group(1) if m else ""
    for key, pattern in (("mkl", r"Math Kernel Library Version ([^\n]+)"), ("onednn", r"MKL-DNN (v[\w.]+)"),
                         ("openmp", r"OpenMP (\d+)")):
        m = re.search(pattern, shown)
        out[key] = m.group(1).strip() if m else ""
    out["mkldnn_enabled"] = str(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)
    return out


def fingerprint() -> dict[str, str]:
    """Everything that decides the floats of a CPU run: CPU vendor, model and instruction sets, the torch
    build and the CPU kernel set it dispatches to, its BLAS / oneDNN / MKL, and dispatch overrides."""
    import torch

    info = _cpuinfo()
    flags = set(info.get("flags", info.get("Features", "")).split())
    env = {k: os.environ[k] for k in DISPATCH_ENV if k in os.environ}
    return {
        "cpu_vendor": info.get("vendor_id", info.get("CPU implementer", platform.processor())),
        "cpu_model": info.get("model name", info.get("CPU part", platform.processor())),
        "machine": platform.machine(),
        "isa": " ".join(f for f in ISA_FLAGS if f in flags),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        **_build(),
        "dispatch_env": " ".join(f"{k}={v}" for k, v in sorted(env.items())),
    }


def fingerprint_id(fp: dict[str, str]) -> str:
    """A short name of a fingerprint for messages."""
    return stable_hash(fp, length=10)
