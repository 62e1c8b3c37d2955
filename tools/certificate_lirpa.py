"""auto_LiRPA's CROWN and alpha-CROWN on a ``new(x) - old(x)`` wrapper, for the 48 cases of docs/certificate.md.

Runs in a separate virtualenv with auto_LiRPA built from source (``pip install --no-deps``; see
docs/certificate.md for the exact steps), with this repository's ``src`` on the path for the cases only:

    PYTHONPATH=src /tmp/h24/venv/bin/python tools/certificate_lirpa.py > /tmp/lirpa.json

Prints one JSON line per case (as it finishes): ``dims``, ``relative``, ``seed``, ``lirpa_crown``, ``lirpa_alpha`` (the width
max over outputs of max(|lower|, |upper|)) and ``lirpa_alpha_seconds``. ``tools/certificate_width.py
--lirpa`` puts them into the table.
"""

from __future__ import annotations

import json
import time

import torch
from auto_LiRPA import BoundedModule, BoundedTensor, PerturbationLpNorm
from torch import nn

from intact.experiments.certificate_width import HEADS_ALPHA, RELATIVES, SEEDS, case


class Difference(nn.Module):
    def __init__(self, new: nn.Module, old: nn.Module):
        super().__init__()
        self.new, self.old = new, old

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.new(x) - self.old(x)


def bounds(new: nn.Module, old: nn.Module, lo: torch.Tensor, hi: torch.Tensor, method: str) -> float:
    model = BoundedModule(Difference(new, old), torch.zeros(1, lo.numel(), dtype=torch.float64), device="cpu")
    x = BoundedTensor(((lo + hi) / 2)[None], PerturbationLpNorm(norm=float("inf"), x_L=lo[None], x_U=hi[None]))
    lb, ub = model.compute_bounds(x=(x,), method=method)
    return float(torch.maximum(lb.abs(), ub.abs()).max().detach())


def main() -> None:
    torch.set_num_threads(1)   # small matrices
    for dims in HEADS_ALPHA:
        for relative in RELATIVES:
            for seed in SEEDS:
                # the heads are drawn under torch's default float32 (as tools/certificate_width.py draws them);
                # auto_LiRPA's alpha-CROWN then needs float64 as the default for its own buffers
                torch.set_default_dtype(torch.float32)
                old, new, (lo, hi) = case(list(dims), relative, seed)
                torch.set_default_dtype(torch.float64)
                start = time.perf_counter()
                alpha = bounds(new, old, lo, hi, "CROWN-Optimized")
                print(json.dumps({"dims": list(dims), "relative": relative, "seed": seed, "lirpa_alpha": alpha,
                                  "lirpa_alpha_seconds": time.perf_counter() - start,
                                  "lirpa_crown": bounds(new, old, lo, hi, "CROWN")}), flush=True)


if __name__ == "__main__":
    main()
