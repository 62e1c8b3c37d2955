"""The image benchmarks on synthetic trees in the real layouts: prepare, pixels, loader, bad input, end to end."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import image_trees as trees
from conftest import REPO
from intact.config import ConfigError, resolve_run, run_from_dict, validate_config
from intact.data import benchmark_class, benchmark_settings, open_benchmark
from intact.data.image_config import IMAGENET_C, IMAGENET_MIX, IMAGENET_R, ImageBenchmarkConfig
from intact.data.loader import EpochPlan, eval_batches, steps_per_epoch, train_batches
from intact.data.prepare_images import ImageError
from intact.data.split_lists import SPLITS_DIR, SplitError, check_split
from intact.io import read_json
from intact.layering import load_file

R2, C2 = ["art", "cartoon"], ["defocus_blur", "glass_blur"]


def bench_cfg(name: str, **kw) -> ImageBenchmarkConfig:
    return benchmark_settings({"name": name, "backbone": "vit_rgb", "image_size": 32, **kw})


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """One tree per layout (2 tasks, 4 classes, 3 images per class and task)."""
    base = tmp_path_factory.mktemp("trees")
    trees.imagenet_r(base / "imagenet-r", base / "r_lists", R2)
    trees.imagenet_c(base / "imagenet-c", base / "c_lists", C2)
    trees.domainnet(base / "DomainNet", ["real", "quickdraw"])
    mix = base / "mix_lists"
    mix.mkdir()
    for half in ("r", "c"):
        for part in ("train", "test"):
            (mix / f"{half}_{part}.txt").write_text((base / f"{half}_lists" / f"{part}.txt").read_text())
    return base


def configs(base: Path) -> dict[str, dict]:
    """The four benchmark types as config blocks over the synthetic trees."""
    return {
        "imagenet_r": {"type": "imagenet_r", "root": str(base / "imagenet-r"), "split": str(base / "r_lists"),
                       "domains": R2},
        "imagenet_c": {"type": "imagenet_c", "root": str(base / "imagenet-c"), "split": str(base / "c_lists"),
                       "domains": C2},
        "domainnet": {"type": "domainnet", "root": str(base / "DomainNet"), "domains": ["real", "quickdraw"]},
        "imagenet_mix": {"type": "imagenet_mix", "root_r": str(base / "imagenet-r"), "root_c": str(base / "imagenet-c"),
                         "split": str(base / "mix_lists"), "domains": ["c_defocus_blur", "r_art"],
                         # the switch: C tasks as ImageNet-C's (stored at 33 for the crop), so that the tasks
                         # differ in size; the default (the authors') is tested below
                         # (test_imagenet_mix_c_tasks_use_the_authors_transform_unless_switched)
                         "c_transform": "imagenet_c"},
    }


@pytest.fixture(scope="module")
def prepared(tree, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("prepared")
    return {name: benchmark_class(c["type"]).prepare(bench_cfg(name, **c), out / name, workers=2, progress=False)
            for name, c in configs(tree).items()}


# ---- the shipped split files ---------------------------------------------------------------------------

def test_shipped_split_files_match_their_checksums():
    sums = dict(reversed(line.split()) for line in (SPLITS_DIR / "SHA256SUMS").read_text().splitlines())
    assert len(sums) == 6
    for name, digest in sums.items():
        assert hashlib.sha256((SPLITS_DIR / name).read_bytes()).hexdigest() == digest
    assert (SPLITS_DIR / "README.md").is_file() and (SPLITS_DIR / "SHA256SUMS.orig").is_file()


CODA_COUNTS = {"art": (1239, 289), "cartoon": (2969, 757), "deviantart": (1732, 431), "graffiti": (730, 211),
               "embroidery": (582, 140), "graphic": (533, 111), "origami": (442, 108), "painting": (2297, 538),
               "misc": (4574, 1099), "sticker": (394, 114), "sculpture": (977, 219), "sketch": (3662, 972),
               "tattoo": (1529, 418), "toy": (1179, 332), "videogame": (1161, 261)}


@pytest.mark.slow
def test_real_imagenet_r_splits_pass_the_check_with_the_paper_counts(tmp_path):
    """Every path of both shipped ImageNet-R splits as an empty file: the split check passes, the counts are
    docs/protocols.md's."""
    from intact.data.imagenet_r import ImageNetR
    from intact.data.split_lists import read_list

    root = tmp_path / "imagenet-r"
    paths = {p for f in ("coda_train", "coda_test", "ka_train",
                         "ka_test") for p, _ in read_list(SPLITS_DIR / f"imagenet-r_{f}.txt.xz")}
    for d in {p.split("/")[0] for p in paths}:
        (root / d).mkdir(parents=True)
    for p in paths:
        (root / p).touch()
    tasks, files = ImageNetR.plan(bench_cfg("imagenet_r", type="imagenet_r", root=str(root), split="coda"))
    assert [t.name for t in tasks] == list(IMAGENET_R)
    assert {t.name: (len(t.train), len(t.test)) for t in tasks} == CODA_COUNTS
    check_split({t.name: {"train": t.train, "test": t.test} for t in tasks}, 200)
    assert [f["file"] for f in files] == ["imagenet-r_coda_train.txt.xz", "imagenet-r_coda_test.txt.xz"]
    ka, _ = ImageNetR.plan(bench_cfg("r_ka", type="imagenet_r", root=str(root), split="ka"))
    check_split({t.name: {"train": t.train, "test": t.test} for t in ka}, 200)
    assert (sum(len(t.train) for t in ka), sum(len(t.test) for t in ka)) == (21964, 8036)


def test_real_imagenet_c_and_mix_splits_give_the_paper_counts():
    from intact.data.imagenet_c import ImageNetC
    from intact.data.imagenet_mix import ImageNetMix

    c, _ = ImageNetC.plan(bench_cfg("c", type="imagenet_c", root="/data/c"))
    assert [t.name for t in c] == list(IMAGENET_C)
    assert all((len(t.train), len(t.test)) == (7000, 3000) for t in c)
    assert (c[0].resize, c[0].train_crop, c[0].test_crop) == (33, 33, 32)  # Resize(230) / crop 224, scaled to 32 px
    mix, files = ImageNetMix.plan(bench_cfg("m", type="imagenet_mix", root_r="/data/r", root_c="/data/c"))
    assert [t.name for t in mix] == list(IMAGENET_MIX) and len(mix) == 30 and mix[1].name == "r_art"
    assert sum(len(t.train) for t in mix) == 105000 + 21964
    assert {f["file"] for f in files} == {"imagenet-c_train.txt.xz", "imagenet-c_test.txt.xz",
                                          "imagenet-r_ka_train.txt.xz", "imagenet-r_ka_test.txt.xz"}
    # every task numbers the 200 classes alike (ImageNet-R's KA map is ImageNet-C's: Mix's tasks share the head)
    from intact.data.split_lists import relabelled

    assert relabelled({t.name: {"train": t.train, "test": t.test} for t in mix}) == []


# ---- prepare_data ---------------------------------------------------------------------------------------

def reference_transform(path: Path, resize: int, crop: int) -> np.ndarray:
    """What the reference code feeds the network: torchvision Resize + CenterCrop + ToTensor, as uint8 HWC."""
    from torchvision import transforms

    t = transforms.Compose([transforms.Resize(resize), transforms.CenterCrop(crop), transforms.ToTensor()])
    x = t(Image.open(path).convert("RGB"))
    return (x * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()


def test_stored_pixels_equal_torchvision_resize_center_crop(prepared, tree):
    for name, resize, crop_train, crop_test in (("imagenet_r", 32, 32, 32), ("imagenet_c", 33, 33, 32)):
        bench = open_benchmark(prepared[name])
        task = bench.manifest["tasks"][1]
        for split, crop in (("train", crop_train), ("test", crop_test)):
            x = np.load(bench.root / task["arrays"][split]["x"])
            lists = Path(configs(tree)[name]["split"]) / f"{split}.txt"
            rel = [ln.split()[0] for ln in lists.read_text().splitlines() if task["name"] in ln]
            assert x.shape == (len(rel), crop, crop, 3)
            root = Path(configs(tree)[name]["root"])
            for i in (0, len(rel) - 1):
                np.testing.assert_array_equal(x[i], reference_transform(root / rel[i], resize, crop))


def test_manifest_records_counts_split_files_and_hashes(prepared):
    m = json.loads(prepared["domainnet"].read_text())
    assert [t["name"] for t in m["tasks"]] == ["real", "quickdraw"]
    assert [(t["train"], t["test"], t["classes_in_train"]) for t in m["tasks"]] == [(8, 4, 4), (8, 4, 4)]
    assert m["num_classes"] == 345 and m["skipped"] == []
    assert m["class_names"][:4] == ["aircraft_carrier", "apple", "bee", "zebra"] and m["class_names"][4] is None
    assert {f["file"].rsplit("/", 1)[-1] for f in m["split_files"]} == {"real_train.txt", "real_test.txt",
                                                                        "quickdraw_train.txt", "quickdraw_test.txt"}
    for rel, digest in m["files"].items():
        assert hashlib.sha256((prepared["domainnet"].parent / rel).read_bytes()).hexdigest() == digest


def test_prepare_resumes_after_a_failure_and_redoes_nothing_finished(tree, tmp_path, monkeypatch):
    import intact.data.prepare_images as prep

    monkeypatch.setattr(prep, "CHUNK", 3)
    base = tmp_path / "r"
    trees.imagenet_r(base, tmp_path / "lists", R2)
    bad = base / trees.WNIDS[3] / "cartoon_1.jpg"
    good = bad.read_bytes()
    bad.write_bytes(b"not a jpeg")
    cfg = bench_cfg("r", type="imagenet_r", root=str(base), split=str(tmp_path / "lists"), domains=R2)
    with pytest.raises(prep.ImageError, match="cartoon_1.jpg"):
        benchmark_class("imagenet_r").prepare(cfg, tmp_path / "out", workers=1, progress=False)
    out = tmp_path / "out"
    assert not (out / "manifest.json").exists() and not (out / "tasks/cartoon/train_x.npy").exists()
    assert (out / "tasks/art/train_x.npy").exists()  # the first task finished
    progress = json.loads((out / "tasks/cartoon/train.progress.json").read_text())
    assert progress["done"] == [0, 3]  # the chunks before the bad file (row 7 of 8) are recorded
    bad.write_bytes(good)
    decoded: list[int] = []
    real = prep._decode_chunk
    monkeypatch.setattr(prep, "_decode_chunk", lambda job: decoded.append(job[1]) or real(job))
    manifest = benchmark_class("imagenet_r").prepare(cfg, out, workers=1, progress=False)
    assert decoded == [6, 0, 3]  # cartoon train's last chunk, then cartoon test; art is not decoded again
    fresh = benchmark_class("imagenet_r").prepare(cfg, tmp_path / "fresh", workers=1, progress=False)
    assert json.loads(manifest.read_text())["files"] == json.loads(fresh.read_text())["files"]


def test_unreadable_image_can_be_skipped_and_is_listed(tree, tmp_path):
    base = tmp_path / "r"
    trees.imagenet_r(base, tmp_path / "lists", R2)
    (base / trees.WNIDS[0] / "art_0.jpg").write_bytes(b"\xff\xd8 broken")
    cfg = bench_cfg("r", type="imagenet_r", root=str(base), split=str(tmp_path / "lists"), domains=R2,
                    skip_unreadable=True)
    m = benchmark_class("imagenet_r").prepare(cfg, tmp_path / "out", workers=1, progress=False)
    man = json.loads(m.read_text())
    assert [s["path"].rsplit("/", 2)[-2:] for s in man["skipped"]] == [[trees.WNIDS[0], "art_0.jpg"]]
    assert man["tasks"][0]["train"] == 7
    bench = open_benchmark(m)
    assert len(bench.train_set(0)) == 7 and len(next(iter(eval_batches(bench.train_set(0), 100)))[1]) == 7
    # fixed in place, then prepared again (`--forcerun`): decoded again, not taken from the first job's arrays, which
    # before 2026-12-01 were kept by their lists' paths alone; so was a split decoded under skip_unreadable
    Image.new("RGB", (40, 40), (200, 30, 90)).save(base / trees.WNIDS[0] / "art_0.jpg")
    m.unlink()
    man = json.loads(benchmark_class("imagenet_r").prepare(cfg, tmp_path / "out", workers=1, progress=False)
                     .read_text())
    assert man["skipped"] == [] and man["tasks"][0]["train"] == 8
    (base / trees.WNIDS[0] / "art_0.jpg").write_bytes(b"\xff\xd8 broken")
    m.unlink()
    strict = dataclasses.replace(cfg, skip_unreadable=False)
    with pytest.raises(ImageError, match="cannot read image .*art_0.jpg"):   # not the arrays decoded skipping it
        benchmark_class("imagenet_r").prepare(strict, tmp_path / "out", workers=1, progress=False)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="only Python 3.12+ warns when a process with threads forks")
def test_a_prepare_beside_another_thread_writes_no_fork_warning(tree, tmp_path):
    """As a warm job prepares (its client watcher is a second thread), the forked pool adds no DeprecationWarning
    to the job's log (intact.data.prepare_images._decoding_pool: the workers only decode)."""
    done = threading.Event()
    watcher = threading.Thread(target=done.wait, daemon=True)
    watcher.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c = configs(tree)["domainnet"]
            benchmark_class(c["type"]).prepare(bench_cfg("d", **c), tmp_path / "d", workers=2, progress=False)
    finally:
        done.set()
    assert [str(w.message) for w in caught if "fork" in str(w.message)] == []


# ---- bad input: clear messages before any training ------------------------------------------------------

def _prepare(cfg, out):
    return benchmark_class(cfg.type).prepare(cfg, out, workers=1, progress=False)


def test_bad_inputs_name_the_problem(tree, tmp_path):
    lists = tmp_path / "lists"
    root = tree / "imagenet-r"
    ok = (tree / "r_lists" / "train.txt").read_text()
    test = (tree / "r_lists" / "test.txt").read_text()

    def with_train(text: str) -> ImageBenchmarkConfig:
        lists.mkdir(exist_ok=True)
        (lists / "train.txt").write_text(text)
        (lists / "test.txt").write_text(test)
        return bench_cfg("r", type="imagenet_r", root=str(root), split=str(lists), domains=R2)

    with pytest.raises(SplitError, match=r"data root .*/nowhere' does not exist"):
        _prepare(bench_cfg("r", type="imagenet_r", root=str(tmp_path / "nowhere"), split=str(tree / "r_lists"),
                           domains=R2), tmp_path / "o1")
    with pytest.raises(SplitError, match=r"1 of 25 entries are missing files: .*art_99.jpg"):
        _prepare(with_train(ok + f"{trees.WNIDS[0]}/art_99.jpg 0\n"), tmp_path / "o2")
    with pytest.raises(SplitError, match=r"label outside \[0, 200\): .*art_0.jpg \(label 200\)"):
        _prepare(with_train(ok.replace(f"{trees.WNIDS[0]}/art_0.jpg 0", f"{trees.WNIDS[0]}/art_0.jpg 200")),
                 tmp_path / "o3")
    with pytest.raises(SplitError, match=r"duplicated lines: .*art_0.jpg \(train\)"):
        _prepare(with_train(ok + f"{trees.WNIDS[0]}/art_0.jpg 0\n"), tmp_path / "o4")
    with pytest.raises(SplitError, match=r"expected 'relative/path integer_label'"):
        _prepare(with_train(ok + "just_a_path.jpg\n"), tmp_path / "o5")
    for out in ("o1", "o2", "o3", "o4", "o5"):
        assert not (tmp_path / out / "manifest.json").exists() and not (tmp_path / out / "tasks").exists()
    corrupt = tmp_path / "corrupt"
    trees.imagenet_r(corrupt, tmp_path / "clists", R2)
    (corrupt / trees.WNIDS[2] / "cartoon_0.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with pytest.raises(ValueError, match=r"cannot read image .*cartoon_0.jpg.*skip_unreadable"):
        _prepare(bench_cfg("r", type="imagenet_r", root=str(corrupt), split=str(tmp_path / "clists"), domains=R2),
                 tmp_path / "o6")
    assert not (tmp_path / "o6" / "manifest.json").exists()


def paper_like_config(tree: Path, weights: Path, **bench) -> dict:
    cfg = load_file(REPO / "config.yaml")
    cfg["backbones"]["vit_rgb"] = {"model": "vit_rgb_p8", "weights": str(weights), "sha256": None,
                                   "input_mean": [0.0, 0.0, 0.0], "input_std": [1.0, 1.0, 1.0]}
    cfg["benchmarks"].update({n: {**c, "backbone": "vit_rgb", "image_size": 32} for n, c in configs(tree).items()})
    cfg["benchmarks"]["imagenet_r"].update(bench)
    cfg["run"].update(benchmarks=["imagenet_r"], seeds=[0], methods=["coda_p", "coda_p+intact@preset=reference"])
    cfg["tracking"] = {"enabled": False}
    cfg["optim"].update(epochs=1, batch_size=4, drop_last=True)
    cfg["methods"] = {"coda_p": {"pool_size": 6}}
    del cfg["studies"]["tune"]   # on digits_3, whose runs an image-only optim setting (train_crop, ...) would not fit
    return cfg


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    from safetensors.torch import save_file

    from intact.models.backbone import create_vit

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("w") / "vit_rgb.safetensors"
    save_file(create_vit("vit_rgb_p8").state_dict(), str(path))
    return path


def test_config_errors_name_the_key_the_type_and_the_missing_file(tree, weights, tmp_path):
    cfg = paper_like_config(tree, weights)
    validate_config(cfg)
    bad = copy.deepcopy(cfg)
    bad["benchmarks"]["imagenet_r"]["root_c"] = "/x"
    with pytest.raises(ConfigError, match=r"unknown key 'benchmarks.imagenet_r.root_c'.*for a benchmark of type "
                       r"'imagenet_r'"):
        validate_config(bad)
    bad = paper_like_config(tree, weights, split="kaa")
    with pytest.raises(ConfigError, match=r"'benchmarks.imagenet_r.split' = 'kaa': neither a split of this type "
                       r"\(coda, ka\)"):
        validate_config(bad)
    bad = paper_like_config(tree, weights, root="$NO_SUCH_ROOT_VAR/imagenet-r")
    with pytest.raises(ConfigError, match=r"'benchmarks.imagenet_r.root': data root '\$NO_SUCH_ROOT_VAR/imagenet-r' "
                       r"does not exist \(environment variable \$NO_SUCH_ROOT_VAR is not set\)"):
        validate_config(bad)
    validate_config(bad, check_files=False)  # the dry run's check
    bad = paper_like_config(tree, weights, domains=["art", "fog"])
    with pytest.raises(ConfigError, match=r"'benchmarks.imagenet_r.domains\[1\]' = 'fog' is not allowed"):
        validate_config(bad)


@pytest.mark.parametrize("kind", sorted(configs(Path("/x"))))
def test_the_backbone_must_take_the_image_types_size_and_channels(tree, weights, kind):
    """Each image type declares its RGB images, so validation holds them to the backbone's input: before, an
    ``image_size`` other than the backbone's, or a one-channel backbone, failed the training job in timm's patch
    embedding (found by tools/settings_fuzz.py jobs)."""
    cfg = paper_like_config(tree, weights)
    cfg["run"]["benchmarks"] = [kind]
    validate_config(cfg)
    cfg["benchmarks"][kind]["image_size"] = 64
    with pytest.raises(ConfigError, match=rf"key 'benchmarks.{kind}.image_size' = 64: backbone 'vit_rgb' "
                       r"\(vit_rgb_p8\) takes 32x32 images"):
        validate_config(cfg)
    cfg["benchmarks"][kind]["image_size"] = 32
    cfg["optim"]["test_resize"] = 31   # the job's own check (test_a_runs_view_...) refused it, after training
    with pytest.raises(ConfigError, match=rf"key 'optim.test_resize' = 31: Resize\(31\) leaves no CenterCrop\(32\) "
                       rf"of the images of benchmark '{kind}'; use test_resize >= 32"):
        validate_config(cfg)
    cfg["optim"]["test_resize"] = 32
    validate_config(cfg)
    cfg["benchmarks"][kind]["backbone"] = "vit_digits"
    with pytest.raises(ConfigError, match=rf"key 'benchmarks.{kind}.backbone' = 'vit_digits': vit_digits_p8 takes "
                       rf"1-channel images, benchmark '{kind}' has 3"):
        validate_config(cfg)


# ---- the loader -----------------------------------------------------------------------------------------

def test_loader_resumed_epoch_gives_identical_batches(prepared):
    data = open_benchmark(prepared["imagenet_c"]).train_set(0)
    kw = dict(seed=3, task=0, epoch=2, batch_size=3, device="cpu")
    full = list(train_batches(data, **kw))
    resumed = list(train_batches(data, first=1, **kw))
    assert len(full) == 3 and len(resumed) == 2
    for (x, y), (xr, yr) in zip(full[1:], resumed):
        assert torch.equal(x, xr) and torch.equal(y, yr)
    other = list(train_batches(data, **{**kw, "epoch": 3}))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(full, other))


def test_loader_crops_and_flips_as_its_plan_says(prepared):
    data = open_benchmark(prepared["imagenet_c"]).train_set(1)  # stored at 33, crop 32: 2 x 2 offsets
    n = len(data)
    plan = EpochPlan.draw(5, 1, 0, n)
    (x, y), = list(train_batches(data, seed=5, task=1, epoch=0, batch_size=n))
    for k in range(n):
        i = int(plan.order[k])
        t, l = int(plan.top[k] * 2), int(plan.left[k] * 2)
        ref = torch.from_numpy(np.array(data.x[i, t:t + 32, l:l + 32])).permute(2, 0, 1).float() / 255
        assert torch.equal(x[k], ref.flip(-1) if plan.flip[k] else ref)
        assert int(y[k]) == int(data.labels[i])
    assert plan.flip.any() and (~plan.flip).any()
    (_, _, index, flips), = list(train_batches(data, seed=5, task=1, epoch=0, batch_size=n, keys=True))
    assert torch.equal(index, plan.order) and torch.equal(flips, plan.flip)  # a cache's (task, index, flip) keys
    # evaluation / the hypercube pass: the centre crop, unflipped, in order - as item access gives it
    ex, ey = next(iter(eval_batches(data, n)))
    assert torch.equal(ex, torch.stack([data[i][0] for i in range(n)])) and torch.equal(ey, data.labels)


def test_joint_training_over_tasks_stored_at_different_sizes(prepared):
    """ImageNet-Mix's joint baseline concatenates C tasks (stored at 33 for the crop) and R tasks (32)."""
    from torch.utils.data import ConcatDataset

    bench = open_benchmark(prepared["imagenet_mix"])
    parts = [bench.train_set(0), bench.train_set(1)]
    assert [p.prepared_size for p in parts] == [33, 32]
    data = ConcatDataset(parts)
    plan = EpochPlan.draw(0, 1, 0, len(data))
    batches = list(train_batches(data, seed=0, task=1, epoch=0, batch_size=5))
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    assert x.shape == (16, 3, 32, 32) and torch.equal(y, torch.cat([p.labels for p in parts])[plan.order])
    k = int(torch.nonzero(plan.order >= 8)[0])  # an R image: no crop room, so only the flip applies
    ref = parts[1][int(plan.order[k]) - 8][0]
    assert torch.equal(x[k], ref.flip(-1) if plan.flip[k] else ref)


def test_drop_last_drops_the_partial_batch(prepared):
    data = open_benchmark(prepared["domainnet"]).train_set(0)  # 8 images
    sizes = [len(y) for _, y in train_batches(data, seed=0, task=0, epoch=0, batch_size=3, drop_last=True)]
    assert sizes == [3, 3] and steps_per_epoch(8, 3, True) == 2 and steps_per_epoch(8, 3, False) == 3
    assert [len(y) for _, y in train_batches(data, seed=0, task=0, epoch=0, batch_size=3)] == [3, 3, 2]
    with pytest.raises(ValueError, match="fewer than one batch"):
        steps_per_epoch(8, 16, True)


def test_drop_last_at_its_default_leaves_existing_run_settings_unchanged(tiny_bench):
    """A new option at its default must not change a run's params / hash (Snakemake would redo finished runs)."""

    cfg = copy.deepcopy(tiny_bench["config"])
    plain = resolve_run(cfg, "digits", "coda_p", 0)
    assert "drop_last" not in plain.to_dict()["optim"] and run_from_dict(plain.to_dict()) == plain
    cfg["optim"]["drop_last"] = True
    dropped = resolve_run(cfg, "digits", "coda_p", 0)
    assert dropped.to_dict()["optim"]["drop_last"] is True and dropped.hash() != plain.hash()
    assert run_from_dict(dropped.to_dict()) == dropped


def test_digits_keep_the_dataloader_batches(tiny_bench):
    """The embedded benchmark's batches are exactly the previous DataLoader(Subset(order)) batches."""
    from torch.utils.data import DataLoader, Subset

    from intact.seeding import task_generator

    data = open_benchmark(tiny_bench["manifest"]).train_set(1)
    order = torch.randperm(len(data), generator=task_generator(0, 1, "epoch0"))
    old = list(DataLoader(Subset(data, order[64:].tolist()), batch_size=32, shuffle=False))
    new = list(train_batches(data, seed=0, task=1, epoch=0, batch_size=32, first=2))
    assert len(old) == len(new) and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(old, new))


# ---- a run's own view of the prepared images (issue 32: the official scripts' transforms) -------------

def _torchvision_box(u: np.ndarray, side: int) -> tuple[float, float, float, float]:
    """RandomResizedCrop.get_params (torchvision, scale (0.08, 1), ratio (3/4, 4/3)) on a side x side image, written
    out as its loop, with ``u`` (attempts, 4) in place of its random draws."""
    import math

    for a, r, t, l in u:
        area = side * side * (0.08 + 0.92 * a)
        ratio = math.exp(math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * r)
        w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
        if 0 < w <= side and 0 < h <= side:
            return math.floor(t * (side - h + 1)), math.floor(l * (side - w + 1)), h, w
    return 0, 0, side, side


def test_random_resized_crop_boxes_are_torchvisions():
    from intact.data.prepared import resized_boxes

    u = torch.rand((500, 10, 4), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u[:3, :, 0] = 0.999   # large areas at extreme ratios do not fit: later attempts, or the fallback
    u[:2, :, 1] = 0.0
    u[0, :, 1] = 1.0
    for side in (32, 33, 224):
        boxes = torch.stack(resized_boxes(u, side), 1).numpy()
        assert [tuple(b) for b in boxes] == [_torchvision_box(x, side) for x in u.numpy()]
        assert (boxes[:, 0] + boxes[:, 2] <= side).all() and (boxes[:, 1] + boxes[:, 3] <= side).all()


def test_a_runs_view_reads_the_prepared_images_as_declared(prepared):
    """train_crop: random_resized -> each image's plan box resized to the input side (and the plan's flip);
    test_resize: R -> the centre window of side size * resize / R, resized (bilinear, pixel centres); the default
    view stays the prepared one; caches of the prepared images are not used for another view."""
    import torch.nn.functional as F

    from intact.cache import cache_tasks, variants
    from intact.data.prepared import resized_boxes

    bench = open_benchmark(prepared["imagenet_r"])         # stored at 32 = the input side, resize 32
    default = list(train_batches(bench.train_set(0), seed=1, task=0, epoch=0, batch_size=8))
    bench.use_view("random_resized", 64)
    data, n = bench.train_set(0), len(bench.train_set(0))
    plan = EpochPlan.draw(1, 0, 0, n, random_resized=True)
    (x, y), = list(train_batches(data, seed=1, task=0, epoch=0, batch_size=n))
    assert torch.equal(y, data.labels[plan.order]) and torch.equal(y, torch.cat([b[1] for b in default]))
    top, left, h, w = (v.long() for v in resized_boxes(plan.resized, 32))
    for k in range(n):
        img = torch.from_numpy(np.array(data.x[int(plan.order[k])])).permute(2, 0, 1).float()[None] / 255
        box = img[..., top[k]:top[k] + h[k], left[k]:left[k] + w[k]]
        ref = F.interpolate(box, size=32, mode="bilinear", align_corners=False)[0]
        assert torch.allclose(x[k], ref.flip(-1) if plan.flip[k] else ref, atol=1e-5), k
    # test_resize 64 on images prepared at Resize(32): Resize(64) + CenterCrop(32) of them, i.e. the centre
    # 16 x 16 window resized to 32 as part of the whole image (its edge samples read the pixels around it)
    ex, _ = next(iter(eval_batches(bench.eval_set(0), 100)))
    stored = torch.from_numpy(np.array(bench.eval_set(0).x)).permute(0, 3, 1, 2).float() / 255
    whole = F.interpolate(stored, size=64, mode="bilinear", align_corners=False)
    assert torch.allclose(ex, whole[..., 16:48, 16:48], atol=1e-5)
    assert torch.equal(ex[0], bench.eval_set(0)[0][0])   # item access: the same view
    assert variants(data) is None and cache_tasks(bench.eval_set(0), bench, "test", "test") is None
    bench.use_view("benchmark", None)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(default, train_batches(bench.train_set(0), seed=1, task=0,
                                                                                epoch=0, batch_size=8)))
    assert variants(bench.train_set(0)) == 2 and cache_tasks(bench.eval_set(0), bench, "test", "test") == [0]
    bench.use_view("benchmark", 20)   # Resize(20) + CenterCrop(32) needs more than the stored 32 x 32
    with pytest.raises(ValueError, match="test_resize >= 32"):
        next(iter(eval_batches(bench.eval_set(0), 4)))


def _pipeline(cfg: dict, prepared: dict, weights: Path, name: str) -> dict[str, torch.Tensor]:
    """What run ``name`` (coda_p on imagenet_r) feeds its model and optimizer: the first training batch (pixels,
    labels), the test images, the training images' unaugmented view, each task's weight decay."""
    from intact.data.loader import eval_batches
    from intact.restore import build_method
    from intact.train import build_optimizer

    run = resolve_run(cfg, "imagenet_r", name, 0)
    bench, method, _ = build_method(run, prepared["imagenet_r"], weights, torch.device("cpu"))
    train = method.training_data(bench, 0)
    x, y = next(iter(train_batches(train, seed=0, task=0, epoch=0, batch_size=8)))
    decay = [build_optimizer(method, run.optim, 2, first_task=f)[0].param_groups[0]["weight_decay"] for f in (1, 0)]
    return {"train_x": x, "train_y": y, "test_x": next(iter(eval_batches(bench.eval_set(0), 100)))[0],
            "train_view_x": next(iter(eval_batches(train, 100)))[0],
            "decay_task0": torch.tensor(decay[0]), "decay_later": torch.tensor(decay[1])}


#: what each optim key a protocol may declare changes in a run's pipeline, and nothing else
CHANGES = {"train_crop": {"train_x"}, "test_resize": {"test_x", "train_view_x"},
           "first_task_weight_decay": {"decay_task0"}, "weight_decay": {"decay_task0", "decay_later"}}


@pytest.mark.parametrize("declared", [
    {"train_crop": "random_resized"}, {"test_resize": 40}, {"first_task_weight_decay": 5e-4},
    {"train_crop": "random_resized", "test_resize": 37, "weight_decay": 2e-4, "first_task_weight_decay": 5e-4},
])
def test_two_protocols_pipelines_differ_exactly_where_their_declarations_do(declared, prepared, tree, weights):
    """Issue 32 item 4: a run under a protocol that declares ``declared`` against the same run under the default
    protocol - the same data order and labels; different training pixels, test pixels, unaugmented training
    view, weight decay of the first / later tasks exactly where a declared key changes them."""
    cfg = paper_like_config(tree, weights)
    cfg["protocols"] = {"official": {"per_method": {"coda_p": {"optim": {"optimizer": "sgd", **declared}}}},
                        "other": {"per_method": {"coda_p": {"optim": {"optimizer": "sgd"}}}}}
    validate_config(cfg)
    base = _pipeline(cfg, prepared, weights, "coda_p@protocol=other")
    under = _pipeline(cfg, prepared, weights, "coda_p@protocol=official")
    expected = set().union(*(CHANGES[k] for k in declared))
    assert {k for k in base if not torch.equal(base[k], under[k])} == expected


def test_a_view_is_refused_where_there_are_no_prepared_images(tiny_bench):
    cfg = copy.deepcopy(tiny_bench["config"])
    cfg["optim"]["train_crop"] = "random_resized"
    with pytest.raises(ConfigError, match="benchmark 'digits' .* has no prepared images to crop"):
        validate_config(cfg, check_files=False)


# ---- end to end -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, view", [("imagenet_r", {}), ("imagenet_c", {}), ("domainnet", {}), ("imagenet_mix", {}),
                                        ("imagenet_c", {"train_crop": "random_resized", "test_resize": 37})])
def test_prepare_train_two_tasks_and_collect_R(name, view, prepared, tree, weights, tmp_path):
    from intact.evaluate import evaluate_task
    from intact.results import collect_run
    from intact.train import train_task

    cfg = paper_like_config(tree, weights)
    cfg["run"]["benchmarks"] = [name]
    cfg["optim"].update(view)    # the official scripts' transforms: no cache of the prepared images applies
    validate_config(cfg)
    run = resolve_run(cfg, name, "coda_p+intact@preset=reference", 0)
    evals, trains = [], []
    for t in range(2):
        out = tmp_path / f"task{t}"
        rec = train_task(run, t, manifest=prepared[name], backbone_weights=weights, out_dir=out,
                         prev_dir=tmp_path / f"task{t - 1}" if t else None, threads=1, progress=False)
        assert rec["train_images"] == 8 and len(rec["epochs"]) == 1
        assert not (view and rec["feature_cache"]["used"])
        evaluate_task(run, t, manifest=prepared[name], backbone_weights=weights, state=out / "state.safetensors",
                      out_path=out / "eval.json", threads=1)
        evals.append(out / "eval.json")
        trains.append(out / "train.json")
    collect_run(evals, trains, tmp_path / "R.csv", tmp_path / "metrics.json", 200)
    lines = (tmp_path / "R.csv").read_text().splitlines()
    assert len(lines) == 3  # header + one row per task

def test_a_val_fraction_that_leaves_no_validation_image_stops_the_evaluation(prepared, tree, weights, tmp_path):
    """Two training images per class here: val_fraction 0.1 rounds to none of any class, and the validation split
    is empty. Its evaluation gave prepared images no batch and wrote 0 % into R (samples 0) before 2026-11-30."""
    from intact.evaluate import evaluate_task
    from intact.train import train_task

    cfg = paper_like_config(tree, weights, val_fraction=0.1)
    validate_config(cfg)
    run = resolve_run(cfg, "imagenet_r", "coda_p@run.eval_split=val", 0)
    out = tmp_path / "task0"
    train_task(run, 0, manifest=prepared["imagenet_r"], backbone_weights=weights, out_dir=out, threads=1,
               progress=False)
    with pytest.raises(ValueError, match=r"task 0 \('[a-z]+'\) has no val image to evaluate on, so its accuracy is "
                                         r"undefined \(val_fraction leaves none of any class\)"):
        evaluate_task(run, 0, manifest=prepared["imagenet_r"], backbone_weights=weights,
                      state=out / "state.safetensors", out_path=out / "eval.json", threads=1)
    assert not (out / "eval.json").exists()
    # the workflow's job, which evaluates too: refused before it trains
    with pytest.raises(ValueError, match=r"task 0 \('[a-z]+'\) has no val image"):
        train_task(run, 0, manifest=prepared["imagenet_r"], backbone_weights=weights, out_dir=tmp_path / "job",
                   threads=1, progress=False, eval_out=tmp_path / "job/eval.json")
    assert not (tmp_path / "job/state.safetensors").exists() and not (tmp_path / "job/checkpoint.pt").exists()


# ==== moved from tests/test_audit_fixes.py (issue 17): split overlap, ImageNet-Mix's transform =

# ---- 9: train/test overlap in a split --------------------------------------------------------------------

def test_a_split_with_train_test_overlap_is_refused_naming_the_file_and_paths(tmp_path):

    root, lists = tmp_path / "imagenet-r", tmp_path / "lists"
    trees.imagenet_r(root, lists, R2)
    train = (lists / "train.txt").read_text().splitlines()
    (lists / "test.txt").write_text((lists / "test.txt").read_text() + "\n".join(train[:2]) + "\n")
    cfg = bench_cfg("r", type="imagenet_r", root=str(root), split=str(lists), domains=R2)
    from intact.data.split_lists import SplitError

    with pytest.raises(SplitError) as err:
        benchmark_class("imagenet_r").prepare(cfg, tmp_path / "out", workers=1, progress=False)
    msg = str(err.value)
    assert "test.txt" in msg and "train.txt" in msg and "2 " in msg and train[0].rsplit(" ", 1)[0] in msg, msg
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_imagenet_c_reuse_across_corruptions_is_a_manifest_warning(tmp_path):

    root, lists = tmp_path / "imagenet-c", tmp_path / "lists"
    trees.imagenet_c(root, lists, C2)
    # the reference lists' design: a test image of one corruption is a training image of another
    test = (lists / "test.txt").read_text().splitlines()
    image = next(ln for ln in test if ln.startswith(C2[0] + "/"))
    reused = image.replace(C2[0], C2[1], 1)                              # the same image, the other corruption
    (lists / "test.txt").write_text("\n".join(ln for ln in test if ln != reused) + "\n")
    (lists / "train.txt").write_text((lists / "train.txt").read_text() + reused + "\n")
    cfg = bench_cfg("c", type="imagenet_c", root=str(root), split=str(lists), domains=C2)
    manifest = read_json(benchmark_class("imagenet_c").prepare(cfg, tmp_path / "out", workers=1, progress=False))
    warnings = manifest["warnings"]
    assert len(warnings) == 1 and "1 test image" in warnings[0] and C2[0] in warnings[0], warnings


# ---- item 2: ImageNet-Mix's C tasks get the authors' transform by default --------------------------------

@pytest.mark.parametrize("c_transform, side", [(None, 32), ("authors", 32), ("imagenet_c", round(32 * 230 / 224))])
def test_imagenet_mix_c_tasks_use_the_authors_transform_unless_switched(tmp_path, c_transform, side):
    from intact.cache import variants
    from intact.data import open_benchmark

    base = tmp_path / "trees"
    trees.imagenet_r(base / "imagenet-r", base / "r_lists", ["art"])
    trees.imagenet_c(base / "imagenet-c", base / "c_lists", ["defocus_blur"])
    (base / "mix_lists").mkdir()
    for half in ("r", "c"):
        for part in ("train", "test"):
            (base / "mix_lists" / f"{half}_{part}.txt").write_text((base / f"{half}_lists" / f"{part}.txt").read_text())
    spec = {k: v for k, v in configs(base)["imagenet_mix"].items() if k != "c_transform"}
    spec.update({"c_transform": c_transform} if c_transform else {})
    cfg = bench_cfg("mix", **spec)
    assert cfg.c_transform == (c_transform or "authors")
    manifest = benchmark_class("imagenet_mix").prepare(cfg, tmp_path / "out", workers=1, progress=False)
    task = read_json(manifest)["tasks"][0]
    assert task["name"] == "c_defocus_blur" and (task["resize"], task["train_crop"],
                                                 task["test_crop"]) == (side, side, 32)
    # the authors' transform has a finite set of variants (flip): the query cache covers the C tasks too
    assert variants(open_benchmark(manifest).train_set(0)) == (None if c_transform == "imagenet_c" else 2)


def test_the_mix_transform_is_part_of_the_hash_and_other_benchmarks_keep_theirs():
    from intact.settings import recorded

    r = bench_cfg("r", type="imagenet_r", root="/x")
    assert "c_transform" not in recorded(r)                    # unset: existing runs' params and hashes stand
    m = bench_cfg("m", type="imagenet_mix", root_r="/x", root_c="/y")
    assert recorded(m)["c_transform"] == "authors"
    # each type declares the keys it takes; the family's runs keep one recorded form (their hashes hold it): the
    # roots a type does not take are recorded as null, in place
    assert [k for k in recorded(m) if k != "c_transform"] == list(recorded(r))
    assert (recorded(r)["root_r"], recorded(r)["root_c"], recorded(m)["root"]) == (None, None, None)
    assert (r.roots(), m.roots()) == ({"root": "/x"}, {"root_r": "/x", "root_c": "/y"})
