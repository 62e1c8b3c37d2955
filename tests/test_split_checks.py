"""The split checks cannot be fooled by spelling or by copies: a test entry naming a training image in another
spelling, or a byte-identical copy of one under another name, is refused naming both (ImageNet-R, DomainNet)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import image_trees as trees
from intact.data import benchmark_class, benchmark_settings
from intact.data.image_config import ImageBenchmarkConfig
from intact.data.split_lists import SplitError, SplitList, check_split, reuse_warnings

R2 = ["art", "cartoon"]


def _cfg(**kw) -> ImageBenchmarkConfig:
    return benchmark_settings({"name": "b", "backbone": "none", "image_size": 32, **kw})


def _prepare(cfg: ImageBenchmarkConfig, out: Path) -> Path:
    return benchmark_class(cfg.type).prepare(cfg, out, workers=1, progress=False)


@pytest.fixture(scope="module")
def r_tree(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("r")
    trees.imagenet_r(base / "root", base / "lists", R2, per_class=3)
    return base


def spellings(root: Path, rel: str) -> list[str]:
    """``a/b.jpg`` as a//b.jpg, a/./b.jpg, x/../a/b.jpg (x a sibling folder), ./a/b.jpg and the absolute path."""
    folder, name = rel.split("/")
    return [f"{folder}//{name}", f"{folder}/./{name}", f"{folder}/../{folder}/{name}", f"./{rel}", str(root / rel)]


def test_a_training_image_in_any_spelling_is_refused_naming_both(r_tree, tmp_path):
    train = (r_tree / "lists" / "train.txt").read_text()
    test = (r_tree / "lists" / "test.txt").read_text()
    rel, label = train.splitlines()[0].split()                   # e.g. n01443537/art_0.jpg
    for i, spelled in enumerate(spellings(r_tree / "root", rel)):
        lists = tmp_path / f"lists{i}"
        lists.mkdir()
        (lists / "train.txt").write_text(train)
        (lists / "test.txt").write_text(test + f"{spelled} {label}\n")
        out = tmp_path / f"out{i}"
        with pytest.raises(SplitError) as err:
            _prepare(_cfg(type="imagenet_r", root=str(r_tree / "root"), split=str(lists), domains=R2), out)
        msg = str(err.value)
        assert "also in its training list" in msg and f"{spelled} (test) is {rel} (train)" in msg, msg
        assert not (out / "manifest.json").exists()


def test_lists_that_number_the_classes_otherwise_in_one_task_are_refused():
    """Label i must be one class (its images' folder) in every task: before 2026-12-01 a list that swapped two
    labels in one domain was accepted, and the run learned two classes under each of the two outputs."""
    def task(name: str, labels: dict[str, int]) -> dict[str, SplitList]:
        entries = [(f"{folder}/{name}_{i}.jpg", y) for folder, y in labels.items() for i in range(2)]
        return {part: SplitList("/root", [p for p, _ in entries[k::2]], [y for _, y in entries[k::2]])
                for k, part in enumerate(("train", "test"))}

    same = {"art": task("art", {"apple": 0, "bee": 1}), "sketch": task("sketch", {"apple": 0, "bee": 1})}
    check_split(same, 2, check_files=False)
    swapped = {**same, "sketch": task("sketch", {"apple": 1, "bee": 0})}
    with pytest.raises(SplitError, match=r"number their classes otherwise than the first list .*apple/sketch_0.jpg "
                                         r"\(sketch/train: label 1; art/train gives label 1 to 'bee', art/train "
                                         r"gives 'apple' label 0\)"):
        check_split(swapped, 2, check_files=False)


def test_a_byte_identical_copy_under_another_name_is_refused_naming_both(r_tree, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(r_tree / "root", root)
    train = (r_tree / "lists" / "train.txt").read_text()
    rel, label = train.splitlines()[0].split()
    copy = rel.replace(".jpg", "_copy.jpg")                      # same domain (art), another name
    shutil.copy(root / rel, root / copy)
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "train.txt").write_text(train)
    (lists / "test.txt").write_text((r_tree / "lists" / "test.txt").read_text() + f"{copy} {label}\n")
    with pytest.raises(SplitError, match=rf"byte-identical copies of training images .*{copy} \(test\) has the bytes "
                       rf"of {rel} \(train\)"):
        _prepare(_cfg(type="imagenet_r", root=str(root), split=str(lists), domains=R2), tmp_path / "out")


def test_domainnet_refuses_another_spelling_and_a_copy(tmp_path):
    root = tmp_path / "DomainNet"
    trees.domainnet(root, ["real"], per_class=3)
    lines = (root / "real_train.txt").read_text()
    rel, label = lines.splitlines()[0].split()
    test = (root / "real_test.txt").read_text()
    (root / "real_test.txt").write_text(test + f"./{rel} {label}\n")
    with pytest.raises(SplitError, match=rf"also in its training list .*\./{rel} \(test\) is {rel} \(train\)"):
        _prepare(_cfg(type="domainnet", root=str(root), domains=["real"]), tmp_path / "o1")
    copy = rel.replace(".jpg", "_9.jpg")
    shutil.copy(root / rel, root / copy)
    (root / "real_test.txt").write_text(test + f"{copy} {label}\n")
    with pytest.raises(SplitError, match=rf"{copy} \(test\) has the bytes of {rel} \(train\)"):
        _prepare(_cfg(type="domainnet", root=str(root), domains=["real"]), tmp_path / "o2")


def test_a_duplicated_line_in_another_spelling_is_a_duplicate(r_tree):
    rel = (r_tree / "lists" / "train.txt").read_text().splitlines()[0].split()[0]
    root = str(r_tree / "root")
    splits = {"art": {"train": SplitList(root, [rel, f"./{rel}"], [0, 0]), "test": SplitList(root, ["x.jpg"], [0])}}
    with pytest.raises(SplitError, match=r"duplicated lines: .*\./"):
        check_split(splits, 200, check_files=False)


def test_imagenet_c_reuse_across_corruptions_stays_a_warning(tmp_path):
    """Another corruption of the same photograph is other bytes and another task: a warning, not a refusal."""
    trees.imagenet_c(tmp_path / "c", tmp_path / "lists", ["defocus_blur", "glass_blur"])
    from intact.data.split_lists import read_list

    splits: dict[str, dict[str, SplitList]] = {}
    for part in ("train", "test"):
        for rel, y in read_list(tmp_path / "lists" / f"{part}.txt"):
            s = splits.setdefault(rel.split("/")[0], {}).setdefault(part, SplitList(str(tmp_path / "c")))
            s.paths.append(rel)
            s.labels.append(y)
    # the second corruption tests on photographs the first trains on (swap its lists' roles)
    blur = splits["glass_blur"]
    blur["test"], blur["train"] = blur["train"], blur["test"]
    check_split(splits, 200)
    assert reuse_warnings(splits)
