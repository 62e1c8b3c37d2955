"""docs/adding-a-method.md is true: exactly its two method files, packaged with exactly its pyproject.toml and
installed into a temporary directory, is found through the ``intact.methods`` entry points and runs through
a tiny Snakemake workflow, with and without ``+intact``; its overlay config validates, and its test written
with the kit :mod:`intact.testing` passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, fenced, install_page_package, python_in, snakemake, tiny_config, write_config
from intact.paths import run_dir

DOC = REPO / "docs" / "adding-a-method.md"


def page(lang: str, first_line: str = "") -> str:
    return fenced(DOC, lang, first_line)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The page's package installed into a temporary folder (for PYTHONPATH), no index, no build isolation."""
    return install_page_package(tmp_path_factory.mktemp("plugin"), DOC)


@pytest.mark.slow
def test_the_installed_method_is_registered_like_a_builtin(installed):
    """Found through its entry point without torch, in the current form (a function implementation or a
    two-argument check would be refused), its implementation a module-level class."""
    code = ("import warnings; warnings.simplefilter('error'); "
            "from intact.methods import METHODS; m = METHODS['l2_anchor']; "
            "from intact.schema import schema; assert 'l2_anchor' in schema()['properties']['methods']['properties']; "
            "import sys; assert 'torch' not in sys.modules; print(m.accepts_intact, m.layer_keys); "
            "assert m.import_class().__qualname__ == 'L2AnchorMethod'")
    out = python_in(installed, code)
    assert out.split() == ["True", "('layers',)"]


@pytest.mark.slow
def test_the_installed_method_runs_through_snakemake_with_and_without_intact(installed, prepared_digits, tmp_path):
    cfg = tiny_config(methods=["l2_anchor", "l2_anchor+intact"])
    cfg["benchmarks"]["digits"]["domains"] = ["blur", "noise"]      # the session's two prepared domains
    cfg["tracking"]["enabled"] = False
    cfg["studies"] = {}
    cfg["methods"]["l2_anchor"] = {"lambda_l2": 0.5}
    prepared_digits(cfg, tmp_path)
    bad = {**cfg, "methods": {**cfg["methods"], "l2_anchor": {"layers": [0, 0]}}}
    write_config(tmp_path / "bad", bad)
    proc = snakemake(tmp_path / "bad", "-n", check=False, env=installed)
    assert proc.returncode != 0 and "methods.l2_anchor.layers" in proc.stdout + proc.stderr  # its own check
    snakemake(tmp_path, env=installed)
    for method, term in (("l2_anchor", "l2"), ("l2_anchor+intact", "intdrift")):
        folder = tmp_path / run_dir("digits", method, 0)
        record = json.loads((folder / "task1/train.json").read_text())
        assert record["epochs"][0][term] > 0, record["epochs"]
        assert (folder / "metrics.json").exists()
        # the job records the plugin it loaded, and the run's settings name it (its hash changes with it)
        [plugin] = record["provenance"]["plugins"]
        assert (plugin["name"], plugin["distribution"], plugin["version"]) == ("l2_anchor", "intact-l2-anchor", "0.1.0")
        assert record["config"]["plugins"] == [f"method l2_anchor: intact-l2-anchor 0.1.0 files {plugin['digest']}"]
    assert "l2" in json.loads((tmp_path / run_dir("digits", "l2_anchor+intact",
                                                  0) / "task1/train.json").read_text())["epochs"][0]


@pytest.mark.slow
def test_the_overlay_of_the_page_validates_over_config_yaml(installed, tmp_path):
    write_config(tmp_path, tiny_config())
    overlay = tmp_path / "l2_anchor.yaml"
    overlay.write_text(page("yaml", "# l2_anchor.yaml"))
    proc = snakemake(tmp_path, "-n", "--configfile", str(tmp_path / "config.yaml"), str(overlay), env=installed)
    assert "train_task" in proc.stdout and "l2_anchor+intact" in proc.stdout


@pytest.mark.slow
def test_the_kit_example_of_the_page_passes(installed, tmp_path):
    """The page's plugin test, as a plugin author would run it: pytest on that file alone (no conftest of ours)."""
    test_file = tmp_path / "test_l2_anchor.py"
    test_file.write_text(page("python", "# test_l2_anchor.py"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                          cwd=tmp_path, env={**os.environ, **installed}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout
