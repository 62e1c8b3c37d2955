"""Split lists (``relative/path label`` per line): the shipped files, a user's own, and their check.

The shipped lists (``splits/*.txt.xz``, with provenance in ``splits/README.md``) are package data;
every list a benchmark reads is recorded with its sha256, so a manifest says exactly which split
produced it. :func:`check_split` runs before any image is decoded.
"""

from __future__ import annotations

import lzma
import os
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Iterable, Mapping

from intact.hashing import sha256_file

SPLITS_DIR = Path(__file__).with_name("splits")
#: how many offending entries an error message shows
SHOW = 5


class SplitError(ValueError):
    """A split list that is missing, malformed, or does not match the image root."""


@dataclass
class SplitList:
    """The entries of one split of one task: paths relative to ``root`` and integer labels."""

    root: str
    paths: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.paths)


def shipped_split(name: str) -> Path:
    """The packaged split file ``name`` (e.g. ``imagenet-r_coda_train.txt.xz``)."""
    path = SPLITS_DIR / name
    if not path.is_file():
        raise SplitError(f"split file {name!r} is not shipped with the package (looked in {SPLITS_DIR})")
    return path


def find_list(folder: str | os.PathLike, stem: str) -> Path:
    """``<folder>/<stem>.txt`` or ``<stem>.txt.xz``; a :class:`SplitError` naming both if neither exists."""
    for suffix in (".txt", ".txt.xz"):
        path = Path(folder) / f"{stem}{suffix}"
        if path.is_file():
            return path
    raise SplitError(f"split list {stem}.txt (or {stem}.txt.xz) not found in {str(folder)!r}")


def read_list(path: str | os.PathLike) -> list[tuple[str, int]]:
    """The ``(path, label)`` lines of a list file (``.xz`` decompressed); a malformed line is an error."""
    path = Path(path)
    opener = lzma.open if path.suffix == ".xz" else open
    out = []
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            rel, _, label = line.rpartition(" ")
            try:
                out.append((rel.strip(), int(label)))
            except ValueError:
                raise SplitError(f"{path}:{lineno}: expected 'relative/path integer_label', got {line!r}") from None
            if not rel.strip():
                raise SplitError(f"{path}:{lineno}: expected 'relative/path integer_label', got {line!r}")
    return out


def describe_file(path: Path) -> dict[str, str]:
    """A split file's record for the manifest: where it came from and its sha256."""
    shipped = path.parent.resolve() == SPLITS_DIR.resolve()
    return {"file": path.name if shipped else str(path), "shipped": shipped, "sha256": sha256_file(path)}


def bucket(entries: Iterable[tuple[str, int]], task_of: Callable[[str], str], tasks: Iterable[str],
           root: str) -> dict[str, SplitList]:
    """Group entries by task (entries of tasks not in ``tasks`` are dropped), keeping list order."""
    out = {t: SplitList(root) for t in tasks}
    for rel, label in entries:
        s = out.get(task_of(rel))
        if s is not None:
            s.paths.append(rel)
            s.labels.append(label)
    return out


def _fail(what: str, bad: list[str], total: int) -> SplitError:
    shown = "; ".join(bad[:SHOW]) + ("; ..." if len(bad) > SHOW else "")
    return SplitError(f"split check failed: {len(bad)} of {total} entries {what}: {shown}")


def normalised(root: str, rel: str) -> str:
    """The one spelling of an entry's file: joined to its root (an absolute entry stays itself), absolute, with
    ``.``, ``..`` and doubled separators resolved (lexically: symbolic links are the content check's job)."""
    return os.path.abspath(os.path.join(root, rel))


def _refuse(task: str, what: str, pairs: list[str], total: int,
            list_files: Mapping[str, Mapping[str, str]] | None) -> SplitError:
    names = (list_files or {}).get(task, {})
    files = " and ".join(names.get(k, f"the {k} list") for k in ("train", "test"))
    shown = "; ".join(pairs[:SHOW]) + ("; ..." if len(pairs) > SHOW else "")
    return SplitError(f"split check failed: task {task}: {len(pairs)} of {total} test entries {what} ({files}): "
                      f"{shown}")


def check_overlap(splits: dict[str, dict[str, SplitList]],
                  list_files: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """No task may test on an image it trains on: a test entry naming a training file - in any spelling
    (:func:`normalised`: relative or absolute, ``.``, ``..``, doubled separators) - is a :class:`SplitError`
    naming the list files, the count and both spellings of the first pairs. ``list_files``: task ->
    {"train"/"test": the list file(s) the entries came from}. Byte-identical copies: :func:`check_content_overlap`."""
    for task, parts in splits.items():
        train = {normalised(parts["train"].root, p): p for p in parts["train"].paths}
        pairs = [f"{p} (test) is {train[k]} (train)" for p in parts["test"].paths
                 if (k := normalised(parts["test"].root, p)) in train]
        if pairs:
            raise _refuse(task, "are also in its training list", pairs, len(parts["test"]), list_files)


def check_content_overlap(splits: dict[str, dict[str, SplitList]],
                          list_files: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """No task may test on a byte-identical copy of one of its training images under another name: files are
    compared by size first and only same-size candidates are hashed (sha256); empty files are left to the
    decoder, which refuses them. A :class:`SplitError` names both files. (ImageNet-C's reuse of one photograph
    across corruptions is other bytes: a warning, :func:`reuse_warnings`.)"""
    for task, parts in splits.items():
        sized: dict[int, list[str]] = {}
        for p in parts["train"].paths:
            sized.setdefault(os.stat(os.path.join(parts["train"].root, p)).st_size, []).append(p)
        hashed: dict[str, str] = {}
        pairs = []
        for p in parts["test"].paths:
            path = os.path.join(parts["test"].root, p)
            size = os.stat(path).st_size
            same = sized.get(size, []) if size else []   # an empty file holds no image (decoding refuses it)
            if not same:
                continue
            for q in same:
                if q not in hashed:
                    hashed[q] = sha256_file(os.path.join(parts["train"].root, q))
            digest = sha256_file(path)
            twin = next((q for q in same if hashed[q] == digest), None)
            if twin is not None:
                pairs.append(f"{p} (test) has the bytes of {twin} (train)")
        if pairs:
            raise _refuse(task, "are byte-identical copies of training images", pairs, len(parts["test"]), list_files)


def image_of(rel: str) -> str:
    """The source image a list entry shows: its class folder and file name (``<wnid>/<file>``); an ImageNet-C
    entry ``<corruption>/5/<wnid>/<file>`` shows the same image as every other corruption's entry of it."""
    return "/".join(rel.replace("\\", "/").split("/")[-2:])


def reuse_warnings(splits: dict[str, dict[str, SplitList]]) -> list[str]:
    """One warning per task whose test images (as :func:`image_of` names them) another task trains on -
    by design of the ImageNet-C reference lists, where every corruption's test images are training images
    of other corruptions (the corruption differs, the underlying photograph does not)."""
    trained: dict[str, set[str]] = {t: {image_of(p) for p in parts["train"].paths} for t, parts in splits.items()}
    out = []
    for task, parts in splits.items():
        others = set().union(*(v for t, v in trained.items() if t != task)) if len(trained) > 1 else set()
        shared = [p for p in parts["test"].paths if image_of(p) in others]
        if shared:
            out.append(f"task {task}: {len(shared)} test image{'s' if len(shared) > 1 else ''} of {len(parts['test'])} "
                       f"(first: {shared[0]}) are training images of other tasks (another corruption or domain of the "
                       "same photograph; by design of the ImageNet-C reference lists)")
    return out


def relabelled(splits: Mapping[str, Mapping[str, SplitList]]) -> list[str]:
    """Entries whose label the lists read first give another class folder, or whose folder they give another label:
    every task must number the classes alike, or a domain-incremental run learns two meanings for one output."""
    labels: dict[int, tuple[str, str]] = {}
    folders: dict[str, tuple[int, str]] = {}
    bad = []
    for t, parts in splits.items():
        for part, s in parts.items():
            for r, y in zip(s.paths, s.labels):
                folder = os.path.basename(os.path.dirname(normalised(s.root, r)))
                seen, where = labels.setdefault(y, (folder, f"{t}/{part}"))
                other, there = folders.setdefault(folder, (y, f"{t}/{part}"))
                if seen != folder or other != y:
                    bad.append(f"{r} ({t}/{part}: label {y}; {where} gives label {y} to {seen!r}, {there} gives "
                               f"{folder!r} label {other})")
    return bad


def check_split(splits: dict[str, dict[str, SplitList]], num_classes: int, check_files: bool = True,
                list_files: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """Check every (task, split) list: non-empty, labels in range, no duplicated path, no file in both a
    task's train and test list in any spelling (:func:`check_overlap`), the classes numbered alike in every task
    (:func:`relabelled`), every file present, and no test
    image a byte-identical copy of one of its task's training images (:func:`check_content_overlap`).

    ``splits`` maps task -> {"train"/"test": SplitList}. Raises :class:`SplitError` with the count and
    the first offending entries; nothing is decoded or written before this passes.
    """
    total = sum(len(s) for parts in splits.values() for s in parts.values())
    empty = [f"{t}/{p}" for t, parts in splits.items() for p, s in parts.items() if len(s) == 0]
    if empty:
        raise SplitError(f"split check failed: no entries for {', '.join(empty)} (check the task names and lists)")
    bad = [f"{r} (label {y})" for parts in splits.values() for s in parts.values()
           for r, y in zip(s.paths, s.labels) if not 0 <= y < num_classes]
    if bad:
        raise _fail(f"have a label outside [0, {num_classes})", bad, total)
    for part in ("train", "test"):
        seen: set[str] = set()
        dup = []
        for parts in splits.values():
            s = parts[part]
            for r in s.paths:
                key = normalised(s.root, r)
                if key in seen:
                    dup.append(f"{r} ({part})")
                seen.add(key)
        if dup:
            raise _fail("are duplicated lines", dup, total)
    check_overlap(splits, list_files)
    bad = relabelled(splits)
    if bad:
        raise _fail("number their classes otherwise than the first list (a class is its image's folder)", bad, total)
    if not check_files:
        return
    missing = []
    roots = {s.root for parts in splits.values() for s in parts.values()}
    for root in roots:
        if not Path(root).is_dir():
            raise SplitError(f"data root {root!r} does not exist")
    for parts in splits.values():
        for s in parts.values():
            missing += [os.path.join(s.root, r) for r in s.paths if not os.path.isfile(os.path.join(s.root, r))]
    if missing:
        raise _fail("are missing files", missing, total)
    check_content_overlap(splits, list_files)
