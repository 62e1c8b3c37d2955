"""docs/adding-a-benchmark.md is true: exactly its benchmark file, packaged with exactly its pyproject.toml and
installed into a temporary directory, is found through the ``intact.benchmarks`` entry points, and its overlay
runs through Snakemake on a tiny image-folder tree, with and without ``+intact``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml
from PIL import Image, ImageDraw

from conftest import REPO, fenced, install_page_package, snakemake, tiny_config, write_config
from intact.layering import merge
from intact.paths import run_dir

DOC = REPO / "docs" / "adding-a-benchmark.md"


def page(lang: str, first_line: str = "") -> str:
    return fenced(DOC, lang, first_line)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The page's package installed into a temporary folder (for PYTHONPATH), no index, no build isolation."""
    return install_page_package(tmp_path_factory.mktemp("plugin"), DOC)


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


def test_the_installed_benchmark_is_registered_like_a_builtin(installed):
    code = ("import sys; from intact.data import BENCHMARKS, BUILTIN_TYPES; t = BENCHMARKS['shapes']; "
            "from intact.schema import schema; assert 'bench_shapes' in schema()['$defs']; "
            "assert 'shapes' not in BUILTIN_TYPES and 'digits' in BUILTIN_TYPES; "
            "assert 'torch' not in sys.modules; print(t.tasks, t.num_classes)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **installed}, check=True,
                         capture_output=True, text=True).stdout
    assert out.split("\n")[0] == "('photo', 'sketch', 'cartoon') 3"


@pytest.mark.slow
def test_the_overlay_runs_the_benchmark_through_snakemake_with_and_without_intact(installed, tmp_path):
    from safetensors.torch import save_file

    from intact.models.backbone import create_vit

    draw_tree(tmp_path / "shapes")
    weights = tmp_path / "vit_rgb.safetensors"
    save_file(create_vit("vit_rgb_p8").state_dict(), str(weights))
    env = {**installed, "SHAPES_ROOT": str(tmp_path / "shapes"), "VIT_RGB_WEIGHTS": str(weights)}
    overlay = yaml.safe_load(page("yaml", "# shapes.yaml"))
    cfg = merge(tiny_config(), overlay)  # the page's overlay on the tiny config, as Snakemake layers them
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
