"""The default run's behaviour, recorded before the InTAct refactor (issue 11) and checked bit for bit after.

A tiny deterministic run on CPU through the package API: 3 digits domains, 1 epoch, a randomly
initialised (seeded) backbone instead of a pretrained one (the point is bit-identity, not accuracy),
for ``coda_p``, ``coda_p+intact``, ``dualprompt+intact`` and ``l2p+intact``. Recorded per run: R, the
sha256 of every saved tensor (state + hypercubes) and train.json's loss terms / certificate / gate.

Floats depend on the machine: the CPU (vendor, model, instruction sets), the kernels torch dispatches to
and the BLAS / oneDNN build. ``tests/data/regression_default.json`` therefore keeps one reference per
:func:`fingerprint` seen; the test compares tensors and loss terms bit for bit only against the
reference of this machine's fingerprint (and skips, saying so, where there is none), and R - a count of
argmax hits, identical across every fingerprint stored so far - against all of them.

- ``python tests/regression_run.py --add`` adds (or replaces) this machine's reference; run it on a
  commit whose behaviour is known good (e.g. main after a green CI elsewhere), never to make a change pass;
- ``python tests/regression_run.py --write`` drops every reference and stores this machine's only: for an
  intended behaviour change (say so in the commit); other machines then ``--add`` theirs again.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from unittest import mock

import torch

from intact.fingerprint import fingerprint, fingerprint_id  # noqa: F401  (the test imports fingerprint from here)

HERE = Path(__file__).resolve().parent
STORED = HERE / "data" / "regression_default.json"
FORMAT = 2
METHODS = ["coda_p", "coda_p+intact", "dualprompt+intact", "l2p+intact"]
TASKS = 3


def describe(fp: dict[str, str]) -> str:
    return (f"{fingerprint_id(fp)} ({fp['cpu_vendor']} {fp['cpu_model']}, {fp['cpu_capability']}, torch {fp['torch']}, "
            f"BLAS {fp['blas_info']}, oneDNN {fp['onednn']}{', ' + fp['dispatch_env'] if fp['dispatch_env'] else ''})")


def load_references(path: Path = STORED) -> list[dict]:
    """The stored references: ``[{"fingerprint": {...}, "runs": {method: {"R", "tensors", "train"}}}]``."""
    stored = json.loads(path.read_text())
    if stored.get("format") != FORMAT:
        raise ValueError(f"{path}: format {stored.get('format')}, expected {FORMAT} (see tests/regression_run.py)")
    return stored["references"]


def matching(references: list[dict], fp: dict[str, str]) -> dict | None:
    """The reference written on a machine with fingerprint ``fp``, or None."""
    return next((r for r in references if r["fingerprint"] == fp), None)


def shared_R(references: list[dict]) -> dict[str, list] | None:
    """Every method's R when all references agree on it (it is portable so far), else None."""
    if not references:
        return None
    first = {m: v["R"] for m, v in references[0]["runs"].items()}
    same = all({m: v["R"] for m, v in r["runs"].items()} == first for r in references[1:])
    return first if same else None


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
    """Run every method of :data:`METHODS` for :data:`TASKS` tasks, on the CPU also where CUDA is visible (the
    references are CPU runs, named by their CPU fingerprint); return what is compared."""
    with mock.patch("torch.cuda.is_available", return_value=False):  # intact.seeding.configure_torch picks CPU
        return _compute(workdir)


def _compute(workdir: Path) -> dict:
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

    out: dict = {"fingerprint": fingerprint(), "runs": {}}
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


def save(references: list[dict], path: Path = STORED) -> None:
    path.write_text(json.dumps({"format": FORMAT, "references": references}, indent=1, sort_keys=True) + "\n")


def main(argv: list[str]) -> None:
    import tempfile

    if len(argv) != 1 or argv[0] not in ("--add", "--write"):
        raise SystemExit("usage: python tests/regression_run.py --add | --write  (see the module docstring)")
    with tempfile.TemporaryDirectory() as tmp:
        now = json.loads(json.dumps(compute(Path(tmp))))  # the float spelling the test compares
    fp = now["fingerprint"]
    refs = [] if argv[0] == "--write" or not STORED.exists() else load_references()
    portable = shared_R(refs)
    if portable is not None and {m: v["R"] for m, v in now["runs"].items()} != portable:
        print(f"note: R on this machine differs from the R of the {len(refs)} stored reference(s); from now on "
              "R is compared only where the fingerprint matches", file=sys.stderr)
    mine = next((i for i, r in enumerate(refs) if r["fingerprint"] == fp), None)
    if mine is None:
        refs.append(now)
    else:
        refs[mine] = now  # in place: the file's order stays, so a diff shows only changed values
    save(refs)
    print(f"{STORED}: reference of {describe(fp)} stored ({len(refs)} in all)")


if __name__ == "__main__":
    main(sys.argv[1:])
