"""docs/adding-a-benchmark.md is true: exactly its benchmark file (rotdigits), packaged with exactly its
pyproject.toml and installed into a temporary directory, is found through the ``intact.benchmarks`` entry points,
and its overlay runs through Snakemake on the digits backbone, with and without ``+intact``, leaving its
pretraining images out, with the stored query cache and the preview. Its kit test (intact.testing) passes, and the
same file with a prepare that writes its declared tasks instead of the config's is refused before any training.
The image benchmark the page points to (tests/plugins/shapes, a plugin of its own) is installed the same way and
runs on a tiny image-folder tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml
from PIL import Image, ImageDraw

from conftest import (REPO, fenced, install_package, install_page_package, python_in, pythonpath, snakemake,
                      tiny_config, write_config)
from intact.layering import merge
from intact.paths import run_dir

DOC = REPO / "docs" / "adding-a-benchmark.md"
SHAPES = REPO / "tests" / "plugins" / "shapes"  # the image benchmark's package: the page links it


def page(lang: str, first_line: str = "") -> str:
    return fenced(DOC, lang, first_line)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The image benchmark's package installed into a temporary folder (for PYTHONPATH), no index, no build
    isolation (built in a copy, so the repository's folder stays clean)."""
    root = tmp_path_factory.mktemp("plugin")
    return install_package(shutil.copytree(SHAPES, root / "pkg"), root / "site")


@pytest.fixture(scope="module")
def installed_rot(tmp_path_factory):
    """The page's array benchmark, installed the same way."""
    return install_page_package(tmp_path_factory.mktemp("plugin_rot"), DOC, "intact-rotdigits")


@pytest.mark.slow
def test_the_installed_array_benchmark_is_registered_and_validates_without_torch(installed_rot):
    code = ("import sys; from intact.data import BENCHMARKS, BUILTIN_TYPES; t = BENCHMARKS['rotdigits']; "
            "from intact.testing import tiny_config; from intact.config import validate_config; cfg = tiny_config(); "
            "cfg['benchmarks']['rotdigits'] = {'type': 'rotdigits', 'backbone': 'vit_digits'}; "
            "cfg['run']['benchmarks'] = ['rotdigits']; validate_config(cfg); "
            "assert 'rotdigits' not in BUILTIN_TYPES and 'torch' not in sys.modules; print(t.tasks, t.num_classes)")
    out = python_in(installed_rot, code)
    assert out.split("\n")[0] == "('rot0', 'rot30', 'rot60', 'rot90') 10"


@pytest.mark.slow
def test_the_kit_example_of_the_page_passes(installed_rot, tmp_path):
    """The page's plugin test, as a plugin author would run it: pytest on that file alone (no conftest of ours)."""
    test_file = tmp_path / "test_rotdigits.py"
    test_file.write_text(page("python", "# test_rotdigits.py"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                          cwd=tmp_path, env={**os.environ, **installed_rot}, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def rot_config() -> dict:
    """The page's overlay on the tiny config, as Snakemake layers them (two rotations, one seed, one epoch)."""
    cfg = merge(tiny_config(), yaml.safe_load(page("yaml", "# rotdigits.yaml")))
    cfg["benchmarks"]["rotdigits"]["domains"] = ["rot0", "rot90"]
    cfg.update(tracking={**cfg["tracking"], "enabled": False}, studies={})
    return cfg


@pytest.mark.slow
def test_the_array_benchmark_runs_through_snakemake_on_the_digits_backbone(installed_rot, prepared_digits, tmp_path):
    from intact.data.digits import pretrain_indices
    from intact.io import load_tensors

    prepared_digits(rot_config(), tmp_path)  # the digits entry and its backbone: the session's
    runs = {m: run_dir("rotdigits", m, 0) for m in ("coda_p", "coda_p+intact")}
    snakemake(tmp_path, "results/figures/rotdigits/domains.png", *(f"{f}/metrics.json" for f in runs.values()),
              env=installed_rot)
    manifest = json.loads((tmp_path / "results/data/rotdigits/manifest.json").read_text())
    assert manifest["benchmark"] == "rotdigits" and [t["name"] for t in manifest["tasks"]] == ["rot0", "rot90"]
    assert (tmp_path / "results/figures/rotdigits/domains.png").stat().st_size > 0
    # the backbone pretrained on the digits entry's clean images, none of which rotdigits trains or tests on
    assert (tmp_path / "results/backbones/vit_digits.safetensors").exists()
    data = load_tensors(tmp_path / "results/data/rotdigits/data.safetensors")
    seen = set(pretrain_indices(0.4, 0)[1].tolist())
    assert seen and not seen & set(data["train_index"].tolist() + data["test_index"].tolist())
    for folder in runs.values():
        record = json.loads((tmp_path / folder / "task1/train.json").read_text())
        assert record["feature_cache"]["query"].startswith("read from"), record["feature_cache"]  # the data.task marker
        metrics = json.loads((tmp_path / folder / "metrics.json").read_text())
        assert metrics["task_names"] == ["rot0", "rot90"], metrics
    record = json.loads((tmp_path / runs["coda_p+intact"] / "task1/train.json").read_text())
    assert record["epochs"][-1]["intdrift"] > 0


@pytest.mark.slow
def test_a_prepare_that_writes_other_tasks_is_refused_before_any_training(installed_rot, prepared_digits, tmp_path):
    """The page's file with ``tasks = ROTATIONS[:len(cfg.tasks)]``: the prepare job fails naming the plugin and what
    differs, and no train_task starts."""
    source = page("python", "# intact_rotdigits.py")
    assert source.count("tasks = cfg.tasks") == 1
    site = tmp_path / "site"
    shutil.copytree(installed_rot["PYTHONPATH"].split(os.pathsep)[0], site)
    (site / "intact_rotdigits.py").write_text(source.replace("tasks = cfg.tasks", "tasks = ROTATIONS[:len(cfg.tasks)]"))
    env = {"PYTHONPATH": pythonpath(site, REPO / "src")}
    prepared_digits(rot_config(), tmp_path / "w")
    proc = snakemake(tmp_path / "w", check=False, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and ("benchmark 'rotdigits' (type 'rotdigits', from entry point 'rotdigits = "
                                     "intact_rotdigits:BENCHMARK' (group 'intact.benchmarks') of distribution "
                                     "'intact-rotdigits 0.1.0'): results/data/rotdigits/manifest.json does not "
                                     "match the config: tasks ['rot0', 'rot30'], the config ['rot0', 'rot90'] (its "
                                     "prepare must write what the config declares)") in out, out[-3000:]
    assert not (tmp_path / "w/results/data/rotdigits/manifest.json").exists()
    assert not list((tmp_path / "w/results").rglob("task0")), "a train_task started"


def draw_tree(root, per_class: int = 6) -> None:
    """``<root>/<domain>/<class>/<n>.png``: each class a shape, each domain a colour scheme (40 x 40 RGB)."""
    rng = np.random.default_rng(0)
    styles = {"photo": ((200, 40, 40), (30, 30, 30)), "sketch": ((20, 20, 20), (240, 240, 240)),
              "cartoon": ((40, 160, 240), (250, 220, 60))}
    for domain, (ink, paper) in styles.items():
        for shape in ("circle", "square", "triangle"):
            for n in range(per_class):
                img = Image.new("RGB", (40, 40), paper)
                x, y = rng.integers(14, 26, size=2).tolist()
                r = int(rng.integers(7, 12))
                draw = ImageDraw.Draw(img)
                if shape == "circle":
                    draw.ellipse((x - r, y - r, x + r, y + r), fill=ink)
                elif shape == "square":
                    draw.rectangle((x - r, y - r, x + r, y + r), fill=ink)
                else:
                    draw.polygon([(x - r, y + r), (x + r, y + r), (x, y - r)], fill=ink)
                (root / domain / shape).mkdir(parents=True, exist_ok=True)
                img.save(root / domain / shape / f"{n:03d}.png")


@pytest.mark.slow
def test_the_installed_benchmark_is_registered_like_a_builtin(installed):
    code = ("import sys; from intact.data import BENCHMARKS, BUILTIN_TYPES; t = BENCHMARKS['shapes']; "
            "from intact.schema import schema; assert 'bench_shapes' in schema()['$defs']; "
            "assert 'shapes' not in BUILTIN_TYPES and 'digits' in BUILTIN_TYPES; "
            "assert 'torch' not in sys.modules; print(t.tasks, t.num_classes)")
    out = python_in(installed, code)
    assert out.split("\n")[0] == "('photo', 'sketch', 'cartoon') 3"


@pytest.mark.slow
def test_the_overlay_runs_the_benchmark_through_snakemake_with_and_without_intact(installed, tmp_path):
    from safetensors.torch import save_file

    from intact.models.backbone import create_vit

    draw_tree(tmp_path / "shapes")
    weights = tmp_path / "vit_rgb.safetensors"
    save_file(create_vit("vit_rgb_p8").state_dict(), str(weights))
    env = {**installed, "SHAPES_ROOT": str(tmp_path / "shapes"), "VIT_RGB_WEIGHTS": str(weights)}
    overlay = yaml.safe_load((SHAPES / "shapes.yaml").read_text())
    cfg = merge(tiny_config(), overlay)  # the package's overlay on the tiny config, as Snakemake layers them
    cfg.update(tracking={**cfg["tracking"], "enabled": False}, studies={})
    cfg["optim"]["epochs"] = 2  # 12 images, one step per epoch: the second step is the first away from the anchors
    work = tmp_path / "work"
    write_config(work / "bad", merge(cfg, {"benchmarks": {"shapes": {"image_size": 36}}}))
    proc = snakemake(work / "bad", "-n", check=False, env=env)
    assert proc.returncode != 0 and "benchmarks.shapes.image_size" in proc.stdout + proc.stderr  # its own check
    write_config(work, cfg)
    runs = {m: run_dir("shapes", m, 0) for m in ("coda_p", "coda_p+intact")}  # relative to the working folder
    snakemake(work, "results/figures/shapes/domains.png", *(f"{f}/metrics.json" for f in runs.values()), env=env)
    runs = {m: work / f for m, f in runs.items()}
    manifest = json.loads((work / "results/data/shapes/manifest.json").read_text())
    assert manifest["type"] == "shapes" and [t["name"] for t in manifest["tasks"]] == ["photo", "sketch"]
    assert [(t["train"], t["test"]) for t in manifest["tasks"]] == [(12, 6), (12, 6)]
    assert (work / "results/figures/shapes/domains.png").exists()
    for folder in runs.values():
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["num_tasks"] == 2 and metrics["task_names"] == ["photo", "sketch"]
    record = json.loads((runs["coda_p+intact"] / "task1/train.json").read_text())
    assert record["epochs"][-1]["intdrift"] > 0 and "intdrift" not in json.loads(
        (runs["coda_p"] / "task1/train.json").read_text())["epochs"][-1]
