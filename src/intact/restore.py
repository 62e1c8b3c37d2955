"""A method as a job needs it: the benchmark, the backbone and the method of a run, with a saved state
(and hypercubes) loaded - what a training job continues from and what an evaluation job measures - and what a
task's checkpoint records of what the task started from."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from intact.data import open_benchmark
from intact.hashing import files_digest, sha256_file
from intact.io import damaged, load_tensors
from intact.methods import METHODS, create_method
from intact.methods.shared.base import load_trainable_state
from intact.methods.shared.penalties import restore_hypercubes
from intact.models.backbone import create_backbone
from intact.regularizers.hypercube import load_hypercubes
from intact.settings import RunConfig
from intact.train_record import HYPERCUBE, STATE, tensor_metadata


def written_by(run: RunConfig, task: int) -> dict[str, str]:
    """The metadata of a task's state / hypercube files: who wrote them (checked when they are loaded)."""
    return tensor_metadata(run.method, task, run.hash())


def build_method(run: RunConfig, manifest: Path, backbone_weights: Path, device: torch.device,
                 state: Path | None = None, hypercubes: Path | None = None,
                 state_task: int | None = None) -> tuple[Any, Any, str | None]:
    """The benchmark, the method of ``run`` (on ``device``) and the backbone's sha256, with a saved state
    (and hypercubes) if given; with ``state_task``, files written by another method, task or config are refused."""
    bench = open_benchmark(manifest, run.benchmark)  # refused if prepared otherwise than the run declares
    bench.use_settings(run.benchmark)
    bench.use_view(run.optim.train_crop, run.optim.test_resize)
    # the network family trains a whole network of its own: no frozen backbone to build
    uses_backbone = METHODS[run.base].uses_backbone
    backbone, digest = create_backbone(run.backbone, backbone_weights) if uses_backbone else (None, None)
    method = create_method(run, backbone, bench.num_classes, bench.num_tasks)
    expect = written_by(run, state_task) if state_task is not None else None
    if state is not None:
        tensors = load_tensors(state, expect)
        try:
            load_trainable_state(method, tensors)
        except (ValueError, RuntimeError) as err:
            raise damaged(state, str(err)) from None
    if hypercubes is not None:
        restore_hypercubes(method, load_hypercubes(hypercubes, expect))
    return bench, method.to(device), digest


#: what a task starts from besides its settings (which its run's hash covers), as a checkpoint records it
INPUTS = {"backbone_sha256": "the backbone's weights", "data_sha256": "the prepared data",
          "previous": "the previous task's state or hypercubes", "code": "the training job's code"}


@functools.cache
def job_code() -> str:
    """A digest of the package's Python files (every file a job may run; read as they are, nothing imported): a
    task whose code was edited in between does not continue the epochs the code before trained."""
    package = Path(__file__).resolve().parent
    return files_digest(sorted(package.rglob("*.py")), package)


def task_inputs(backbone_sha: str | None, bench: Any, prev: Path | None) -> dict[str, Any]:
    """The sha256 of the backbone's weights, of the prepared data's files and of the previous task's state and
    hypercubes (None: the task does not continue one), and the job's code (:func:`job_code`), keyed as
    :data:`INPUTS`."""
    previous = {n: sha256_file(prev / n) for n in (STATE, HYPERCUBE) if (prev / n).exists()} if prev else None
    return {"backbone_sha256": backbone_sha, "data_sha256": bench.manifest["files"], "previous": previous,
            "code": job_code()}


def foreign_checkpoint(ck: dict[str, Any], run: RunConfig, task: int, inputs: dict[str, Any]) -> str | None:
    """Why checkpoint ``ck`` is not task ``task`` of ``run``'s to continue from ``inputs`` (:func:`task_inputs`);
    None: it is (the same config, task and inputs)."""
    if ck["run_hash"] != run.hash() or ck["task"] != task:
        return f"it belongs to config {ck['run_hash']} task {ck['task']}, not {run.hash()} task {task}"
    if "inputs" not in ck:
        return "it does not record what its task started from (an earlier intact's checkpoint)"
    changed = [what for key, what in INPUTS.items() if ck["inputs"].get(key) != inputs[key]]
    return f"it was written from other inputs: {', '.join(changed)} changed since" if changed else None
