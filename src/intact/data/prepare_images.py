"""``prepare_data`` for the image benchmarks: check the split, decode once in parallel, store uint8.

Order of work: (1) the whole split is checked against the roots (files exist, labels in range, no
duplicates) before anything is written; (2) every image is decoded once, converted to RGB and
resized + centre-cropped exactly as torchvision's ``Resize(s)`` + ``CenterCrop(c)`` do on a PIL
image, into ``tasks/<task>/<split>_x.npy.partial`` (a memory map written by worker processes in
chunks); (3) a finished array is renamed to ``<split>_x.npy`` next to its labels. A killed job
resumes from the chunks recorded in ``<split>.progress.json``; ``manifest.json`` is written last.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
from multiprocessing.pool import Pool
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from intact.data.split_lists import SplitList, check_split, reuse_warnings
from intact.hashing import sha256_file
from intact.io import read_json, write_json
from intact.settings import plain

CHUNK = 256


class ImageError(ValueError):
    """An image that cannot be decoded."""


@dataclass
class TaskPlan:
    """What one task stores: its lists, the resize side and the crop of each split."""

    name: str
    train: SplitList
    test: SplitList
    resize: int
    train_crop: int
    test_crop: int


def resize_center_crop(path: str | os.PathLike, resize: int, crop: int) -> np.ndarray:
    """RGB pixels (crop, crop, 3) uint8 = torchvision ``Resize(resize)`` + ``CenterCrop(crop)`` on PIL."""
    with Image.open(path) as img:
        img = img.convert("RGB")
        w, h = img.size
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(resize * long / short)
        new_w, new_h = (resize, new_long) if w <= h else (new_long, resize)
        img = img.resize((new_w, new_h), Image.BILINEAR)
        top, left = int(round((new_h - crop) / 2.0)), int(round((new_w - crop) / 2.0))
        return np.asarray(img.crop((left, top, left + crop, top + crop)), dtype=np.uint8)


def _decode_chunk(job: tuple[str, int, list[str], int, int, bool]) -> tuple[int, list[list[Any]]]:
    """Worker: decode ``paths`` into rows ``start..`` of the partial array; return failures if skipping."""
    out_path, start, paths, resize, crop, skip = job
    arr = np.load(out_path, mmap_mode="r+", allow_pickle=False)
    failed = []
    for i, p in enumerate(paths, start):
        try:
            arr[i] = resize_center_crop(p, resize, crop)
        except Exception as err:  # PIL raises many types for a bad file
            if not skip:
                raise ImageError(f"cannot read image {p!r}: {type(err).__name__}: {err} "
                                 "(fix or remove the file, or set skip_unreadable: true to list and skip it)") from None
            failed.append([i, p, f"{type(err).__name__}: {err}"])
    arr.flush()
    del arr
    return start, failed


def _paths_digest(s: SplitList) -> str:
    return hashlib.sha256("\n".join(f"{p} {y}" for p, y in zip(s.paths, s.labels)).encode()).hexdigest()


def _chunk_stamps(s: SplitList) -> list[str]:
    """Per chunk of :data:`CHUNK` entries, a digest of its files' sizes and modification times: a chunk decoded
    before one of its files was replaced or fixed in place is decoded again, not taken from the earlier arrays."""
    def stamp(rel: str) -> str:
        try:
            st = os.stat(os.path.join(s.root, rel))
        except OSError:
            return "-"
        return f"{st.st_size} {st.st_mtime_ns}"
    return [hashlib.sha256(" ".join(stamp(p) for p in s.paths[c:c + CHUNK]).encode()).hexdigest()[:16]
            for c in range(0, len(s), CHUNK)]


def _store_split(out_dir: Path, task: str, split: str, s: SplitList, resize: int, crop: int,
                 skip: bool, pool: Any, bar: tqdm) -> dict[str, Any]:
    """Decode one (task, split) into ``tasks/<task>/<split>_{x,y}.npy``; resume or reuse finished work."""
    folder = out_dir / "tasks" / task
    folder.mkdir(parents=True, exist_ok=True)
    x_final, y_final = folder / f"{split}_x.npy", folder / f"{split}_y.npy"
    done_path, progress_path = folder / f"{split}.done.json", folder / f"{split}.progress.json"
    key = {"n": len(s), "resize": resize, "crop": crop, "lists": _paths_digest(s), "root": s.root, "skip": skip}
    stamps = _chunk_stamps(s)
    if done_path.exists() and x_final.exists() and y_final.exists():
        done = read_json(done_path)
        if done["key"] == key and done.get("stamps") == stamps:
            bar.update(len(s))
            return done
    partial = folder / f"{split}_x.npy.partial"
    progress = read_json(progress_path) if progress_path.exists() else None
    if progress is None or progress["key"] != key or not partial.exists():
        np.lib.format.open_memmap(partial, mode="w+", dtype=np.uint8, shape=(len(s), crop, crop, 3)).flush()
        progress = {"key": key, "done": [], "failed": [], "stamps": {}}
        write_json(progress_path, progress)
    # a finished chunk whose files changed since is decoded again (its skipped files with it)
    finished = {c for c in progress["done"] if progress.get("stamps", {}).get(str(c)) == stamps[c // CHUNK]}
    progress["done"] = sorted(finished)
    progress["failed"] = [f for f in progress["failed"] if f[0] // CHUNK * CHUNK in finished]
    bar.update(sum(min(CHUNK, len(s) - c) for c in finished))
    jobs = [(str(partial), c, [os.path.join(s.root, p) for p in s.paths[c:c + CHUNK]], resize, crop, skip)
            for c in range(0, len(s), CHUNK) if c not in finished]
    results = pool.imap_unordered(_decode_chunk, jobs) if pool is not None else map(_decode_chunk, jobs)
    for start, failed in results:
        progress["done"].append(start)
        progress.setdefault("stamps", {})[str(start)] = stamps[start // CHUNK]
        progress["failed"] += failed
        write_json(progress_path, progress)  # after the worker flushed: a resumed job redoes nothing it needs
        bar.update(min(CHUNK, len(s) - start))
    labels = np.asarray(s.labels, dtype=np.int64)
    for i, _, _ in progress["failed"]:
        labels[i] = -1
    np.save(y_final, labels, allow_pickle=False)
    os.replace(partial, x_final)
    done = {"key": key, "stamps": stamps, "x_sha256": sha256_file(x_final), "y_sha256": sha256_file(y_final),
            "skipped": [{"path": p, "error": e} for _, p, e in sorted(progress["failed"])]}
    write_json(done_path, done)
    progress_path.unlink(missing_ok=True)
    return done


def class_names(plan: list[TaskPlan], num_classes: int) -> list[str | None]:
    """Label -> class name, read from the image's folder (a wnid, or DomainNet's class); None if never listed."""
    names: list[str | None] = [None] * num_classes
    for t in plan:
        for s in (t.train, t.test):
            for rel, y in zip(s.paths, s.labels):
                if names[y] is None:
                    names[y] = os.path.basename(os.path.dirname(rel))
    return names


def list_names(split_files: list[dict[str, Any]], task: str) -> dict[str, str]:
    """Part -> the list file(s) ``task``'s entries of that part came from (for error messages)."""
    out = {}
    for part in ("train", "test"):
        names = [f["file"] for f in split_files if f.get("split") == part and f.get("task", task) == task
                 and ("half" not in f or task.startswith(f"{f['half']}_"))]
        out[part] = ", ".join(names) or f"the {part} list"
    return out


def default_workers() -> int:
    """The cores this process may use (the job's allocation under SLURM / taskset)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _decoding_pool(workers: int) -> Pool:
    """Forked workers, not spawned or from a fork server: those run the job's ``__main__`` again in each worker
    (Snakemake's script, which has no ``__main__`` guard, so each would prepare the benchmark with a pool of its own).
    Python 3.12+ warns when a process with threads forks (a warm job's client watcher, blocked in ``recv``; torch's
    idle pool): no lock of theirs is held across the fork and the workers only decode and hash, so that one warning
    is not written into the job's log."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"This process \(pid=\d+\) is multi-threaded, use of fork\(\)",
                                DeprecationWarning)
        return mp.get_context("fork").Pool(workers)


def prepare_images(cfg: Any, plan: list[TaskPlan], split_files: list[dict[str, Any]], out_dir: str | os.PathLike,
                   workers: int | None = None, progress: bool = True, split: str | None = None) -> Path:
    """Check ``plan`` against the roots, store every task's pixels, write ``manifest.json`` (last). ``cfg``: an
    image type's settings (``name``, ``type``, ``num_classes``, ``image_size``, ``skip_unreadable``); ``split``:
    the named split the manifest records."""
    out_dir = Path(out_dir)
    splits = {t.name: {"train": t.train, "test": t.test} for t in plan}
    check_split(splits, cfg.num_classes, list_files={t.name: list_names(split_files, t.name) for t in plan})
    workers = max(1, workers or default_workers())
    total = sum(len(t.train) + len(t.test) for t in plan)
    pool = _decoding_pool(workers) if workers > 1 else None
    tasks, files, skipped = [], {}, []
    try:
        with tqdm(total=total, desc=f"prepare {cfg.name}", unit="img", file=sys.stderr, mininterval=2.0,
                  disable=not progress) as bar:
            for t in plan:
                arrays, counts = {}, {}
                for split, s, crop in (("train", t.train, t.train_crop), ("test", t.test, t.test_crop)):
                    done = _store_split(out_dir, t.name, split, s, t.resize, crop, cfg.skip_unreadable, pool, bar)
                    x_rel, y_rel = f"tasks/{t.name}/{split}_x.npy", f"tasks/{t.name}/{split}_y.npy"
                    files[x_rel], files[y_rel] = done["x_sha256"], done["y_sha256"]
                    arrays[split] = {"x": x_rel, "y": y_rel}
                    counts[split] = len(s) - len(done["skipped"])
                    skipped += [{"task": t.name, "split": split, **k} for k in done["skipped"]]
                tasks.append({"name": t.name, "train": counts["train"], "test": counts["test"],
                              "classes_in_train": len(set(t.train.labels)), "resize": t.resize,
                              "train_crop": t.train_crop, "test_crop": t.test_crop, "arrays": arrays})
    except BaseException:
        if pool is not None:
            pool.terminate()  # stop the other workers at once; finished chunks stay recorded
        raise
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    manifest = {
        "benchmark": cfg.name, "type": cfg.type, "config": plain(cfg), "num_classes": cfg.num_classes,
        "image_size": cfg.image_size, "split": split, "class_names": class_names(plan, cfg.num_classes),
        "tasks": tasks,
        "train_images": sum(t["train"] for t in tasks), "test_images": sum(t["test"] for t in tasks),
        "split_files": split_files, "warnings": reuse_warnings(splits), "skipped": skipped, "files": files,
        "bytes": sum((out_dir / f).stat().st_size for f in files),
    }
    path = out_dir / "manifest.json"
    write_json(path, manifest)
    return path

