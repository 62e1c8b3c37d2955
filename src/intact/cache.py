"""Feature caches: the query ``q(x)`` and the teacher's feature, computed once instead of every step.

The backbone is frozen and the only random augmentation of the protocol is a horizontal flip, so

- the **query** (the unprompted [CLS]) is a function of (image, flip) alone: the same for every method,
  seed and task of a benchmark. The ``query_cache`` rule writes it once per (benchmark, backbone) as
  memory-mappable ``.npy`` files (:func:`write_query_cache`), one per (split, task), shaped
  ``(N, V, D)`` with V = 2 flip variants for a flipped training split and 1 otherwise;
- the **teacher** feature (the previous task's prompts on the same image) is fixed for a whole task:
  :func:`compute_features` builds it at the start of the task for every training image and variant.

A cache is an optimisation, never a different result: features are computed image by image as the
live path computes them (``tests/test_cache.py`` checks a cached run's R matrix bit for bit against the
live run on CPU in fp32). When the augmentation has no finite set of variants (ImageNet-C's random
crop) there is nothing to cache: :func:`variants` says None and training uses the live path.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import ConcatDataset, Dataset
from tqdm import tqdm

from intact.data.base import Benchmark
from intact.data.loader import _parts, eval_batches
from intact.hashing import sha256_file
from intact.io import atomic_path, read_json, write_json
from intact.methods.shared.frozen import frozen_features, reads_benchmark_queries
from intact.paths import QUERY_CACHE, QUERY_DIGESTS

#: what a feature function sees: the (augmented) images of a batch -> one feature row per image
FeatureFn = Callable[[torch.Tensor], torch.Tensor]
META = Path(QUERY_CACHE).name
#: what a cached query depends on besides the weights' and the data's sha256; a cache written under any
#: other value is refused by name (by every reader: the Snakemake jobs, ``intact speed``, the Python API)
SETTINGS = ("timm_model", "input_mean", "input_std", "image_size", "precision")
#: the largest cache of a method's own feature (a frozen feature beyond the query and the teacher: whole token
#: sequences, e.g. KA-Prompt's ``old_trunk``, 197 x 768 values per image and variant on ViT-B/16: 1.2 MB
#: per image in fp32, ~1.9 GB for an ImageNet-R task); above it training takes the live path, same result
MAX_SEQUENCE_CACHE_BYTES = 4 * 2**30


def query_settings(backbone_cfg, bench: Benchmark, device: torch.device, amp: bool) -> dict:
    """The settings a query cache of ``bench`` under the backbone ``backbone_cfg`` depends on (:data:`SETTINGS`):
    the precision is bfloat16 where training autocasts (CUDA with ``optim.amp``), else float32."""
    m = bench.manifest
    size = m.get("image_size") or (m.get("image_shape") or [None])[-1]
    return {"timm_model": backbone_cfg.model, "input_mean": [float(v) for v in backbone_cfg.input_mean],
            "input_std": [float(v) for v in backbone_cfg.input_std], "image_size": size,
            "precision": "bfloat16" if (device.type == "cuda" and amp) else "float32"}


def variants(data: Dataset) -> int | None:
    """How many augmentation variants a cache of ``data`` holds: 2 for a flipped training split prepared at
    the input size (unflipped, flipped), 1 without augmentation (test splits, the digits benchmark), None
    when the augmentation has no finite set of variants (a random crop: prepared side > input size)."""
    parts = _parts(data)
    if parts is not None and not all(p.as_prepared for p in parts):
        return None   # optim.train_crop / test_resize: not the view a cache of the prepared images holds
    if parts is None or not all(p.augment for p in parts):
        return 1
    if any(p.prepared_size != p.size for p in parts):
        return None
    return 2


@torch.no_grad()
def compute_features(fn: Callable[..., torch.Tensor], data: Dataset, n_variants: int, batch_size: int,
                     device: torch.device, amp: AbstractContextManager | None = None, desc: str = "features",
                     progress: bool = False, given: torch.Tensor | None = None,
                     max_bytes: int | None = None) -> torch.Tensor | None:
    """``fn`` on every image of ``data`` and variant (variant 1 = horizontally flipped): ``(N, V, D)`` on
    ``device``. The images are the loader's deterministic view, so variant ``f`` of image ``i`` is the
    pixel tensor the training loader yields for (i, flip=f). With ``given`` (N, V, ...), ``fn`` also gets
    those rows of the batch (the teacher is a function of the image and its cached query). With ``max_bytes``:
    None, computed no further, when the whole cache would be larger."""
    n = len(data)
    out: torch.Tensor | None = None
    bar = tqdm(total=n * n_variants, desc=desc, disable=not progress, leave=False, mininterval=1.0)
    start = 0
    for x, _ in eval_batches(data, batch_size, device):
        for v in range(n_variants):
            xv = x.flip(3) if v else x
            with amp or nullcontext():
                f = fn(xv) if given is None else fn(xv, given[start:start + len(x), v].to(device))
            if out is None:
                if max_bytes is not None and n * n_variants * f[0].numel() * f.element_size() > max_bytes:
                    bar.close()
                    return None
                out = torch.empty((n, n_variants, *f.shape[1:]), dtype=f.dtype, device=device)
            out[start:start + len(x), v] = f
            bar.update(len(x))
        start += len(x)
    bar.close()
    if out is None:
        raise ValueError("compute_features: the dataset is empty")
    return out


def lookup(cache: torch.Tensor, index: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Rows of ``cache`` (N, V, D) for a batch's dataset indices and flips (variant 0 where V = 1)."""
    v = flip.long() if cache.shape[1] > 1 else torch.zeros_like(index)
    return cache[index.to(cache.device), v.to(cache.device)]


# ---- the query cache of a benchmark (the query_cache rule) -------------------------------------------------

def _name(split: str, task: int) -> str:
    return f"{split}{task}.npy"


def write_query_cache(bench: Benchmark, query: FeatureFn, out_dir: str | Path, *, batch_size: int,
                      device: torch.device, amp: AbstractContextManager | None = None, backbone_sha256: str = "",
                      progress: bool = True, settings: dict | None = None) -> dict:
    """Store ``q(x)`` for every image and variant of every task's train and test split under ``out_dir``
    (float32 ``.npy``, opened later as memory maps); ``query.json``, written last, lists them with their sha256."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files, digests, skipped = {}, {}, {}
    for t in range(bench.num_tasks):
        for split, data in (("train", bench.train_set(t)), ("test", bench.eval_set(t))):
            v = variants(data)
            if v is None:
                skipped[f"{split}{t}"] = "random crop: no finite set of variants (training uses the live path)"
                continue
            feats = compute_features(query, data, v, batch_size, device, amp, f"query {split} task {t}", progress)
            arr = feats.float().cpu().numpy()
            with atomic_path(out_dir / _name(split, t)) as tmp:
                mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=arr.shape)
                mm[:] = arr
                mm.flush()
                del mm
            files[f"{split}{t}"] = list(arr.shape)
            digests[f"{split}{t}"] = sha256_file(out_dir / _name(split, t))
    meta = {"benchmark": bench.name, "backbone_sha256": backbone_sha256, "data_sha256": bench.manifest["files"],
            "settings": settings or {}, "files": files, QUERY_DIGESTS: digests, "skipped": skipped, "dtype": "float32"}
    write_json(out_dir / META, meta)
    return meta


class QueryCache:
    """A query cache on disk: per (split, task) memory maps, checked against the backbone, the data and the
    settings the queries depend on (:data:`SETTINGS`), and each file against its sha256 before its first use."""

    def __init__(self, root: str | Path, bench: Benchmark, backbone_sha256: str, settings: dict):
        """``settings``: what this reader runs under (:func:`query_settings`) - required, so that no reader
        (a Snakemake job, ``train_task`` / ``evaluate_task`` called directly) can skip the check."""
        self.root = Path(root)
        self.meta = read_json(self.root / META)
        again = f"(delete it and rerun: snakemake {self.root / META})"
        if self.meta["backbone_sha256"] != backbone_sha256 or self.meta["data_sha256"] != bench.manifest["files"]:
            raise ValueError(f"query cache {self.root}: written for another backbone or data {again}")
        if QUERY_DIGESTS not in self.meta:
            raise ValueError(f"query cache {self.root}: lists no sha256 of its files (written by an older version): "
                             "`intact migrate results` adds them")
        self.verified: set[str] = set()
        written = self.meta.get("settings", {})
        for key in SETTINGS:
            if key not in written:
                raise ValueError(f"query cache {self.root}: records no {key} (written by an older version) {again}")
            if written[key] != settings[key]:
                raise ValueError(f"query cache {self.root}: written with {key} = {written[key]!r}, this run uses "
                                 f"{settings[key]!r} {again}")

    def get(self, split: str, task: int) -> np.ndarray | None:
        """The (N, V, D) memory map of one split, or None when it is not cached."""
        key, path = f"{split}{task}", self.root / _name(split, task)
        if key not in self.meta["files"]:
            return None
        if key not in self.verified:
            if sha256_file(path) != self.meta[QUERY_DIGESTS].get(key):
                raise ValueError(f"query cache {self.root}: {path.name} is not the file query.json lists (its sha256 "
                                 f"differs: edited or damaged) (delete {self.root / META} and rerun)")
            self.verified.add(key)
        return np.load(path, mmap_mode="r", allow_pickle=False)

    def for_tasks(self, split: str, tasks: list[int], device: torch.device) -> torch.Tensor | None:
        """The rows of the concatenation of ``tasks``' splits (how the joint baseline trains), on ``device``."""
        arrays = [self.get(split, t) for t in tasks]
        if any(a is None for a in arrays):
            return None
        return torch.from_numpy(np.concatenate([np.asarray(a) for a in arrays])).to(device)


def cache_tasks(data: Dataset, bench: Benchmark, split: str, eval_split: str) -> list[int] | None:
    """The tasks whose cached ``split`` makes up ``data`` in order (one task's split or the joint
    baseline's concatenation), or None when ``data`` is not such a split (e.g. a validation view)."""
    if eval_split != "test":  # the cache covers the full train / test splits only
        return None
    parts = data.datasets if isinstance(data, ConcatDataset) else [data]
    tasks = []
    for p in parts:
        t = getattr(p, "task", None)  # set on a task's full train / test split
        if t is None or not getattr(p, "as_prepared", True):   # (another view than the cache's)
            return None
        tasks.append(int(t))
    return tasks


def task_caches(method, bench: Benchmark, train_set: Dataset, *, eval_split: str, batch_size: int,
                device: torch.device, amp: AbstractContextManager | None, query_cache: QueryCache | None,
                enabled: bool, progress: bool = False) -> tuple[dict[str, torch.Tensor], dict]:
    """The caches a task trains with (``{"query": (N, V, D), "teacher": ...}`` over ``train_set``) and what
    ``train.json`` records about them. The query comes from the cache where it covers the data,
    else it is computed here (one pass per image and variant, shared by all epochs); the teacher is
    always computed here (it changes with every task)."""
    fns = frozen_features(method)
    if not fns:
        return {}, {"used": False, "reason": "the method has no frozen features to cache"}
    if not enabled:
        return {}, {"used": False, "reason": "optim.feature_cache: false (the live path)"}
    v = variants(train_set)
    if v is None:
        return {}, {"used": False, "reason": "the augmentation (a random crop, or the run's own view: "
                                             "optim.train_crop, test_resize) has no finite set of cached variants: "
                                             "the live path (a query and a teacher pass per step)"}
    caches: dict[str, torch.Tensor] = {}
    record: dict = {"used": True, "variants": v}
    tasks = cache_tasks(train_set, bench, "train",
                        eval_split) if (query_cache is not None and reads_benchmark_queries(method)) else None
    cached = query_cache.for_tasks("train", tasks, device) if tasks is not None else None
    if "query" not in fns:  # a method without a query (InfLoRA): only its teacher is cached
        pass
    elif cached is not None and cached.shape[:2] == (len(train_set), v):
        caches["query"], record["query"] = cached, f"read from {query_cache.root}"
    else:
        caches["query"] = compute_features(fns["query"], train_set, v, batch_size, device, amp, "query cache", progress)
        record["query"] = "computed at the start of the task"
    if "teacher" in fns:
        caches["teacher"] = compute_features(fns["teacher"], train_set, v, batch_size, device, amp, "teacher cache",
                                             progress, given=caches.get("query"))
        record["teacher"] = "computed at the start of the task"
    for name in sorted(set(fns) - {"query", "teacher"}):  # a method's own: token sequences, hence the budget
        cache = compute_features(fns[name], train_set, v, batch_size, device, amp, f"{name} cache", progress,
                                 given=caches.get("query"), max_bytes=MAX_SEQUENCE_CACHE_BYTES)
        if cache is None:
            record[name] = (f"not cached: over {MAX_SEQUENCE_CACHE_BYTES / 2**30:g} GiB for {len(train_set)} images x "
                            f"{v} variants (the live path)")
        else:
            caches[name], record[name] = cache, "computed at the start of the task"
    return caches, record


def build_query_cache(backbone_cfg, manifest: str | Path, backbone_weights: str | Path, out_dir: str | Path, *,
                      batch_size: int = 512, amp: bool = True, threads: int | None = None,
                      progress: bool = True, benchmark: Any = None) -> dict:
    """The body of the ``query_cache`` job: the query of every prepared image of a benchmark for the
    backbone ``backbone_cfg``, in the precision training uses (bf16 autocast on CUDA with ``amp``).
    The values do not depend on ``batch_size`` (each image's query is computed as the live path does).
    ``benchmark``: its resolved settings, which the manifest must match (intact.data.manifest)."""
    from intact.data import open_benchmark
    from intact.models.backbone import create_backbone
    from intact.seeding import configure_torch

    device = configure_torch(threads)
    bench = open_benchmark(manifest, benchmark)
    backbone, digest = create_backbone(backbone_cfg, backbone_weights)
    backbone = backbone.to(device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if (device.type == "cuda" and amp) else None
    return write_query_cache(bench, backbone.query, out_dir, batch_size=batch_size, device=device,
                             amp=autocast, backbone_sha256=digest, progress=progress,
                             settings=query_settings(backbone_cfg, bench, device, amp))
