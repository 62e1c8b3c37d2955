"""Elastic Weight Consolidation (Kirkpatrick et al., PNAS 2017): diagonal Fisher and its quadratic penalty.

Pure torch functions over ``{name: tensor}`` dicts so they can be tested on any model. The Fisher is the
*empirical* one: the mean over training samples of the squared gradient of ``-log p(y | x)`` at the
sample's true label, computed per sample (``torch.func.vmap`` over ``torch.func.grad``) - squaring a
mini-batch gradient instead would give a different, batch-size dependent quantity.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping

import torch
from torch.func import grad, vmap

#: ``loss(params, x, y)``: the summed negative log-likelihood of a batch under ``params``
NllFn = Callable[[dict[str, torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]


def ewc_penalty(params: Mapping[str, torch.Tensor], anchor: Mapping[str, torch.Tensor],
                fisher: Mapping[str, torch.Tensor], lam: float) -> torch.Tensor:
    """``(lam / 2) * sum_i F_i (theta_i - theta*_i)^2`` over every name in ``fisher``."""
    total = None
    for name, f in fisher.items():
        term = (f * (params[name] - anchor[name]).pow(2)).sum()
        total = term if total is None else total + term
    if total is None:
        raise ValueError("ewc_penalty: the Fisher dict is empty")
    return 0.5 * lam * total


def empirical_fisher(nll: NllFn, params: Mapping[str, torch.Tensor],
                     batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                     chunk_size: int | None = None) -> dict[str, torch.Tensor]:
    """Diagonal empirical Fisher ``mean_n (d nll(x_n, y_n) / d theta)^2`` of every tensor in ``params``.

    ``params`` are detached inside; ``nll`` must compute the loss from the tensors it is given (e.g. via
    ``torch.func.functional_call``). ``chunk_size`` bounds how many per-sample gradients live at once.
    """
    detached = {k: v.detach() for k, v in params.items()}

    def one(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nll(p, x.unsqueeze(0), y.unsqueeze(0))

    per_sample = vmap(grad(one), in_dims=(None, 0, 0), chunk_size=chunk_size)
    sums = {k: torch.zeros_like(v) for k, v in detached.items()}
    count = 0
    for x, y in batches:
        with warnings.catch_warnings():
            # CPU attention has no vmap batching rule: torch loops over the samples instead and says so
            # for every batch; the result is the same, the warning is noise in every EWC job's log
            warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented "
                                    "the batching rule")
            grads = per_sample(detached, x, y)
        for k, g in grads.items():
            sums[k] += g.pow(2).sum(dim=0)
        count += len(y)
    if count == 0:
        raise ValueError("empirical_fisher: no samples")
    return {k: s / count for k, s in sums.items()}
