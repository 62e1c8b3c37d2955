"""auto_LiRPA's CROWN and alpha-CROWN on a ``new(x) - old(x)`` wrapper, for the 48 cases of docs/certificate.md.

Runs in a separate virtualenv with auto_LiRPA built from source (``pip install --no-deps``; the exact steps:
docs/log/2026-11-27-certificate-alpha-crown-200.md), with this repository's ``src`` on the path for the cases only:

    PYTHONPATH=src /tmp/lirpa-venv/bin/python tools/certificate_lirpa.py > /tmp/lirpa.jsonl

Prints one JSON line per case (as it finishes): ``dims``, ``relative``, ``seed``, ``lirpa_crown`` and, per
alpha-CROWN setting of :data:`SETTINGS`, its width (max over outputs of max(|lower|, |upper|)) and
``<name>_seconds`` (process CPU time). ``tools/certificate_width.py --lirpa`` puts them into the table.

Every setting optimises the intermediate bounds too: ``compute_bounds`` is called without intermediate bounds,
so each iteration recomputes them with their own slopes (auto_LiRPA's ``fix_interm_bounds`` only keeps bounds
that are passed in). Under torch >= 2.14 ``clamp`` passes no gradient at the ends of its range, where
alpha-CROWN starts every slope (CROWN's 0 or 1): the optimisation would stop after 10 iterations at CROWN's
bound. :func:`patch_clamp` restores the gradient there (as torch 2.13 passed it) before anything runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time

import torch
from auto_LiRPA import BoundedModule, BoundedTensor, PerturbationLpNorm
from auto_LiRPA.operators.relu import BoundRelu
from torch import nn

from intact.experiments.certificate_width import HEADS_ALPHA, RELATIVES, SEEDS, case

#: alpha-CROWN settings (auto_LiRPA's optimize_bound_args): its defaults (20 iterations, lr 0.5), and 200
#: iterations at lr 0.5 and at lr 0.1 (learning-rate decay 0.98 per iteration and early stop after 10
#: iterations without improvement are auto_LiRPA's defaults in all three)
SETTINGS = {"lirpa_alpha": {}, "lirpa_alpha200": {"iteration": 200},
            "lirpa_alpha200_lr01": {"iteration": 200, "lr_alpha": 0.1}}


class Difference(nn.Module):
    def __init__(self, new: nn.Module, old: nn.Module):
        super().__init__()
        self.new, self.old = new, old

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.new(x) - self.old(x)


def _relu_mask_alpha(lower, upper, lb_lower_d, ub_lower_d, leaky_alpha=0.0):
    """auto_LiRPA 0.7.1's ``BoundRelu._relu_mask_alpha`` with a clamp whose gradient passes at its ends."""
    lower_mask = (lower >= 0).requires_grad_(False).to(lower.dtype)
    upper_mask = (upper <= 0).requires_grad_(False)
    zero_coeffs = False if leaky_alpha > 0 else upper_mask.all()
    no_mask = (1. - lower_mask) * (1. - upper_mask.to(upper.dtype))
    out = []
    for d in (lb_lower_d, ub_lower_d):
        if d is not None:
            d = (d + (d.detach().clamp(leaky_alpha, 1.0) - d.detach())) * no_mask + lower_mask
            if leaky_alpha > 0:
                d = d + upper_mask * leaky_alpha
        out.append(d)
    return out[0], out[1], zero_coeffs


def patch_clamp() -> bool:
    """Replace auto_LiRPA's slope clamp where torch's clamp stops the gradient at its ends; whether it did."""
    x = torch.zeros((), requires_grad=True)
    x.clamp(0.0, 1.0).backward()
    if float(x.grad) == 0.0:
        BoundRelu._relu_mask_alpha = staticmethod(_relu_mask_alpha)
        return True
    return False


def bounds(new: nn.Module, old: nn.Module, lo: torch.Tensor, hi: torch.Tensor, method: str,
           options: dict | None = None) -> float:
    model = BoundedModule(Difference(new, old), torch.zeros(1, lo.numel(), dtype=torch.float64), device="cpu",
                          bound_opts={"optimize_bound_args": options or {}, "verbosity": 0})
    x = BoundedTensor(((lo + hi) / 2)[None], PerturbationLpNorm(norm=float("inf"), x_L=lo[None], x_U=hi[None]))
    with contextlib.redirect_stdout(io.StringIO()):     # its early-stop notices, not JSON
        lb, ub = model.compute_bounds(x=(x,), method=method)
    return float(torch.maximum(lb.abs(), ub.abs()).max().detach())


def main() -> None:
    torch.set_num_threads(1)   # small matrices
    patched = patch_clamp()
    for dims in HEADS_ALPHA:
        for relative in RELATIVES:
            for seed in SEEDS:
                # the heads are drawn under torch's default float32 (as tools/certificate_width.py draws them);
                # auto_LiRPA's alpha-CROWN then needs float64 as the default for its own buffers
                torch.set_default_dtype(torch.float32)
                old, new, (lo, hi) = case(list(dims), relative, seed)
                torch.set_default_dtype(torch.float64)
                row = {"dims": list(dims), "relative": relative, "seed": seed, "clamp_patched": patched,
                       "lirpa_crown": bounds(new, old, lo, hi, "CROWN")}
                for name, options in SETTINGS.items():
                    start = time.process_time()
                    row[name] = bounds(new, old, lo, hi, "CROWN-Optimized", options)
                    row[f"{name}_seconds"] = time.process_time() - start
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
