"""The MLP drift experiment (appendix "Evolution of Internal Drift"): Split-digits in the domain-incremental
setting, InTAct as the appendix applies it against LwF and fine-tuning.

Tasks: digit pairs (0,1), (2,3), ..., (8,9) with binary labels (first / second digit of the pair: Split-MNIST
DIL), from scikit-learn's bundled 8x8 digits - or from real MNIST IDX files when ``mnist_path`` is set.
Network: ``fc0 -> act0 -> fc1 -> act1 -> fc2``. InTAct (appendix): the first hidden layer is the feature
extractor - L_Feat on its output (``fc1``'s input) against the previous task's network - and L_IntDrift,
L_Var, L_Align act on the later layers (``fc1``, ``fc2``, each against its own input's box).

Drift: after task ``i`` the hidden activations of task ``i``'s reference samples (its test images) are
kept; after every later task ``t`` the normalised L1 drift ``sum |A_t - A_i| / sum |A_i|`` is measured per
hidden layer; the curve shows its mean over the earlier tasks ``i < t``.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from intact.metrics import summarize
from intact.models.networks import mlp
from intact.regularizers.lwf import distillation_loss
from intact.regularizers.regularizer import HypercubeTracker, IntactRegularizer, frozen_copy
from intact.settings import IntactConfig
from intact.paths import expand_path
from intact.settings.experiments import DriftConfig, drift_missing_inputs, mnist_file

METHODS = ("finetune", "lwf", "intact")
HIDDEN = ("fc1", "fc2")  #: the hidden layers, named by the Linear that reads them


# ---- data -------------------------------------------------------------------------------------------

def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (MNIST's format; ``.gz`` or raw) as a numpy array."""
    path = Path(path)
    data = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    if data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_images(cfg: DriftConfig) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor] | None]:
    """Flattened images in [0, 1] with digit labels: (all, None) for the bundled digits (split per task
    later), or (train, test) from the MNIST IDX files under ``mnist_path``."""
    if cfg.mnist_path is None:
        from sklearn.datasets import load_digits

        d = load_digits()
        return (torch.tensor(d.data / 16.0, dtype=torch.float32), torch.tensor(d.target)), None
    missing = drift_missing_inputs(cfg)
    if missing:
        raise FileNotFoundError("; ".join(missing))
    root = Path(expand_path(cfg.mnist_path))
    split = {}
    for part, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(mnist_file(root, f"{prefix}-images-idx3-ubyte")).reshape(-1, 784) / 255.0
        y = read_idx(mnist_file(root, f"{prefix}-labels-idx1-ubyte"))
        split[part] = (torch.tensor(x, dtype=torch.float32), torch.tensor(y.astype(np.int64)))
    return split["train"], split["test"]


def split_tasks(cfg: DriftConfig, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Per task: train / test images with binary labels (0: the pair's first digit, 1: its second)."""
    from sklearn.model_selection import train_test_split

    (x, y), test = load_images(cfg)
    g = np.random.default_rng(seed)
    tasks = []
    for a, b in cfg.pairs:
        def take(xs, ys, a=a, b=b):
            idx = np.flatnonzero((ys == a) | (ys == b))
            if cfg.max_per_task is not None and len(idx) > cfg.max_per_task:
                idx = np.sort(g.choice(idx, cfg.max_per_task, replace=False))
            return xs[idx], (ys[idx] == b).long()
        if test is None:
            xs, ys = take(x, y)
            tr, te = train_test_split(np.arange(len(ys)), test_size=cfg.test_fraction, stratify=ys.numpy(),
                                      random_state=0)
            tasks.append({"x": xs[tr], "y": ys[tr], "x_test": xs[te], "y_test": ys[te]})
        else:
            (xs, ys), (xt, yt) = take(x, y), take(*test)
            tasks.append({"x": xs, "y": ys, "x_test": xt, "y_test": yt})
    return tasks


# ---- training ---------------------------------------------------------------------------------------

@torch.no_grad()
def hidden_activations(model: nn.Sequential, reg: HypercubeTracker, x: torch.Tensor) -> dict[str, torch.Tensor]:
    model.eval()
    return {k: v for k, v in reg.collect(model, [x]).items() if k in HIDDEN}


def run_drift(cfg: DriftConfig, tasks: list[dict[str, torch.Tensor]], method: str, seed: int) -> dict[str, Any]:
    """Train ``method`` over the tasks; return R (%, rows: task, columns: after task) and the drift per layer."""
    if method not in METHODS:
        raise ValueError(f"drift method {method!r}: expected one of {METHODS}")
    torch.manual_seed(seed)
    in_dim = tasks[0]["x"].shape[1]
    model = mlp(in_dim, cfg.hidden, 2)
    intact = IntactConfig(lambda_intdrift=cfg.lambda_intdrift, lambda_feat=cfg.lambda_feat, lambda_var=cfg.lambda_var,
                          lambda_align=cfg.lambda_align, percentile=cfg.percentile, feat_gate=cfg.feat_gate)
    # InTAct's terms with method "intact"; the boxes alone (hidden activations, no terms) for the others
    reg = (IntactRegularizer(intact, model, list(HIDDEN), feature="fc1") if method == "intact"
           else HypercubeTracker(model, list(HIDDEN), percentile=cfg.percentile))
    previous: nn.Module | None = None
    T = len(tasks)
    R = np.zeros((T, T))
    reference: list[dict[str, torch.Tensor]] = []
    drift = {layer: np.full((T, T), np.nan) for layer in HIDDEN}   # [i, t]: task i's samples after task t
    g = torch.Generator().manual_seed(seed)
    for t, task in enumerate(tasks):
        reg.begin_task(t)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        n = len(task["y"])
        for _ in range(cfg.epochs):
            model.train()
            for idx in torch.randperm(n, generator=g).split(cfg.batch_size):
                x, y = task["x"][idx], task["y"][idx]
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                if method == "lwf" and previous is not None:
                    with torch.no_grad():
                        old = previous(x)
                    loss = loss + cfg.lambda_lwf * distillation_loss(logits, old, cfg.temperature)
                terms = reg.penalty(teacher=lambda teacher: reg.teacher_feature(x)) if method == "intact" else {}  # noqa: B023 (called here)
                for name, value in terms.items():
                    if name != "feat_gate":
                        loss = loss + value
                opt.zero_grad()
                loss.backward()
                opt.step()
        model.eval()
        reg.end_task(t, reg.collect(model, [task["x"]]))
        previous = frozen_copy(model)   # LwF's teacher for the next task
        with torch.no_grad():
            for i in range(T):
                R[i, t] = 100.0 * float((model(tasks[i]["x_test"]).argmax(1) == tasks[i]["y_test"]).float().mean())
        reference.append(hidden_activations(model, reg, task["x_test"]))
        for i in range(t):
            now = hidden_activations(model, reg, tasks[i]["x_test"])
            for layer in HIDDEN:
                a0 = reference[i][layer]
                drift[layer][i, t] = float((now[layer] - a0).abs().sum() / a0.abs().sum().clamp_min(1e-12))
    return {"R": R, "drift": drift, "metrics": summarize(R, num_classes=2)}


def mean_drift_curves(runs: Mapping[str, list[dict[str, Any]]]) -> dict[str, dict[str, np.ndarray]]:
    """method -> layer -> (seeds, T) mean drift over earlier tasks after each task (NaN after task 1)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for method, seeds in runs.items():
        out[method] = {}
        for layer in HIDDEN:
            curves = []
            for r in seeds:
                d = r["drift"][layer]
                curves.append([np.nanmean(d[:t, t]) if t > 0 else np.nan for t in range(d.shape[1])])
            out[method][layer] = np.array(curves)
    return out
