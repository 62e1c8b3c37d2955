"""``train.json``: what one trained task records, defined once.

:class:`TrainRecord` lists its fields; the training job writes it (``record.to_json()``) sealed
(:func:`intact.io.write_record`), and its readers check the seal (:func:`intact.results.read_run`). Fields a
method or the efficiency measurement adds (parameter counts; the hypercubes, EWC's Fisher summary, ...) are kept in
``efficiency`` and ``end`` and written at the top level, where they have always been.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

FILENAME = "train.json"
#: the tensor files a task writes beside its records (each described by :func:`tensor_metadata`), and the
#: ``train.json`` field holding each one's sha256
STATE, HYPERCUBE = "state.safetensors", "hypercube.safetensors"
TENSOR_DIGESTS = {STATE: "state_sha256", HYPERCUBE: "hypercube_sha256"}


@dataclass
class TrainRecord:
    """One task's training record (``task<t>/train.json``)."""

    benchmark: str
    method: str
    seed: int
    task: int
    task_name: str
    config_hash: str
    train_images: int
    epochs: list[dict[str, float]]      #: per epoch: mean loss terms, seconds, images_per_s
    seconds: float
    images_per_s: float
    peak_memory_mb: float
    efficiency: dict[str, Any]          #: total / trainable parameters, train_batches, inference timing, device
    certificate: float | None           #: InTAct's drift bound over the previous box (None: none measured)
    end: dict[str, Any]                 #: what the method's end of task recorded (hypercube, inside_previous, ewc, ...)
    resumed_from: dict[str, int] | None
    nonfinite: dict[str, Any]
    feature_cache: dict[str, Any]
    #: what the task's optimizer was built with: its class and schedule, and per group its lr, weight decay and size
    optimizer: dict[str, Any]
    backbone_sha256: str | None
    data_sha256: Any
    state_sha256: str | None            #: sha256 of the task's state.safetensors as written (None until written)
    hypercube_sha256: str | None        #: sha256 of its hypercube.safetensors as written
    provenance: dict[str, Any]
    config: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The JSON object, in the order ``train.json`` has always had (efficiency and end fields inline)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("efficiency", "end"):
                out.update(value)
            else:
                out[f.name] = value
        return out


def tensor_metadata(method: str, task: int, config_hash: str) -> dict[str, str]:
    """The metadata of a task's state and hypercube files: who wrote them (checked wherever they are read)."""
    return {"method": method, "task": str(task), "config_hash": config_hash}
