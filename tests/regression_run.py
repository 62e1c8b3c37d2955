"""The default run's behaviour, recorded before the InTAct refactor (issue 11) and checked bit for bit after.

A tiny deterministic run on CPU through the package API: 3 digits domains, 1 epoch, a randomly
initialised (seeded) backbone instead of a pretrained one (the point is bit-identity, not accuracy),
for ``coda_p``, ``coda_p+intact``, ``dualprompt+intact`` and ``l2p+intact``. Recorded per run: R, the
sha256 of every saved tensor (state + hypercubes) and train.json's loss terms / certificate / gate.

``python tests/regression_run.py --write`` (re)writes ``tests/data/regression_default.json``; only do
that when a behaviour change is intended, and say so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
STORED = HERE / "data" / "regression_default.json"
METHODS = ["coda_p", "coda_p+intact", "dualprompt+intact", "l2p+intact"]
TASKS = 3


def environment() -> dict[str, str]:
    """What bit-identity depends on: the torch build and the CPU kernels it dispatches to."""
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def _config() -> dict:
    sys.path.insert(0, str(HERE))
    from conftest import tiny_config

    cfg = tiny_config()
    cfg["optim"]["epochs"] = 1
    return cfg


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]


def _train_record(path: Path) -> dict:
    rec = json.loads(path.read_text())
    keep = ("certificate", "sampled_drift", "inside_previous")
    epochs = [{k: v for k, v in e.items() if k not in ("seconds", "images_per_s")} for e in rec["epochs"]]
    return {"epochs": epochs, **{k: rec.get(k) for k in keep}}


def compute(workdir: Path) -> dict:
    """Run every method of :data:`METHODS` for :data:`TASKS` tasks; return what is compared."""
    from intact.config import backbone_config, benchmark_config, resolve_run
    from intact.data import benchmark_class
    from intact.evaluate import evaluate_task
    from intact.io import load_tensors, save_tensors
    from intact.models.backbone import create_vit

    cfg = _config()
    bench_cfg = benchmark_config(cfg, "digits")
    manifest = benchmark_class(bench_cfg.type).prepare(bench_cfg, workdir / "data")
    torch.manual_seed(0)
    vit = create_vit(backbone_config(cfg, "vit_digits").model)
    weights = workdir / "backbone.safetensors"
    save_tensors(weights, {k: v.contiguous() for k, v in vit.state_dict().items()})
    from intact.train import train_task

    out: dict = {"environment": environment(), "runs": {}}
    for method in METHODS:
        run = resolve_run(cfg, "digits", method, 0)
        root = workdir / method
        R, tensors, trains = [], {}, []
        for t in range(TASKS):
            d = root / f"task{t}"
            train_task(run, t, manifest=manifest, backbone_weights=weights, out_dir=d,
                       prev_dir=root / f"task{t - 1}" if t else None, threads=1, progress=False)
            ev = evaluate_task(run, t, manifest=manifest, backbone_weights=weights, state=d / "state.safetensors",
                               out_path=d / "eval.json", threads=1)
            R.append(ev["accuracy"])
            for f in ("state", "hypercube"):
                for k, v in load_tensors(d / f"{f}.safetensors").items():
                    tensors[f"task{t}/{f}/{k}"] = _digest(v)
            trains.append(_train_record(d / "train.json"))
        out["runs"][method] = {"R": R, "tensors": tensors, "train": trains}
    return out


if __name__ == "__main__":
    import tempfile

    if "--write" not in sys.argv:
        raise SystemExit("usage: python tests/regression_run.py --write")
    with tempfile.TemporaryDirectory() as tmp:
        values = compute(Path(tmp))
    STORED.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
    print(f"wrote {STORED}")
