"""The kit from a non-editable install (issue 43 item 6): intact built as a wheel and installed into a fresh venv,
a plugin's tests run there with ``intact.testing``, which reads the workflow the wheel ships inside the package
(``intact/workflow``: setup.py). No index is used: the venv takes the shared venv's packages (torch, snakemake,
pytest) through a .pth file naming its site-packages (whose own .pth files, intact's editable one, are not run) and
the PYTHONPATH folders outside this checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO, fenced

BENCH_DOC = REPO / "docs" / "adding-a-benchmark.md"

#: a plugin test that runs the wheel's Snakefile through the kit: the overlay of the page, dry
DRY_RUN = '''
from intact.testing import snakemake, tiny_config, write_config


def test_the_overlay_runs_through_the_wheels_workflow(tmp_path):
    cfg = tiny_config(methods=["coda_p"], benchmarks=["rotdigits"])
    cfg["benchmarks"]["rotdigits"] = {"type": "rotdigits", "backbone": "vit_digits", "domains": ["rot0", "rot30"]}
    write_config(tmp_path, cfg)
    out = snakemake(tmp_path, "-n", "--quiet", "rules").stdout
    assert "prepare_data" in out and "train_task" in out, out
'''


def outside_paths() -> list[str]:
    """The ``PYTHONPATH`` folders outside this checkout: where a machine keeps packages it was given (the GPU
    machine's carried wheels); ``src`` is left out (under it pip would find ``src/intact.egg-info``, the editable
    install's, and skip the wheel as installed)."""
    paths = [Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [str(p) for p in paths if not p.is_relative_to(REPO.resolve())]


def outside_env() -> dict[str, str]:
    """This environment with nothing of this checkout or of the suite's warm parents: ``PYTHONPATH`` only
    :func:`outside_paths`, no ``INTACT_*``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("INTACT_")}
    paths = outside_paths()
    return {**env, "PYTHONPATH": os.pathsep.join(paths)} if paths else env


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], env=outside_env(), check=True, capture_output=True,
                   text=True)


@pytest.mark.slow
def test_a_plugins_tests_pass_with_intact_installed_from_a_wheel(tmp_path):
    checkout = tmp_path / "checkout"   # a copy: building writes build/ and *.egg-info beside the sources
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True, text=True,
                           capture_output=True).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, checkout / name)
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp_path / "dist"), str(checkout))
    wheel, = (tmp_path / "dist").glob("intact-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    shared = [str(Path(sysconfig.get_paths()["purelib"]).resolve()), *outside_paths()]
    (site / "shared.pth").write_text("".join(f"{p}\n" for p in shared))
    pip("--python", python, "install", "--no-deps", "--no-index", str(wheel))

    plugin = tmp_path / "plugin"   # the page's rotdigits package, installed (not editable) into the venv
    plugin.mkdir()
    (plugin / "pyproject.toml").write_text(fenced(BENCH_DOC, "toml"))
    (plugin / "intact_rotdigits.py").write_text(fenced(BENCH_DOC, "python", "# intact_rotdigits.py\n"))
    pip("--python", python, "install", "--no-deps", "--no-build-isolation", "--no-index", str(plugin))

    tests = tmp_path / "plugin_tests"
    tests.mkdir()
    (tests / "test_rotdigits.py").write_text(fenced(BENCH_DOC, "python", "# test_rotdigits.py\n"))
    (tests / "test_dry_run.py").write_text(DRY_RUN)
    env = {**outside_env(), "INTACT_TEST_CACHE": str(tmp_path / "cache")}   # nothing of this checkout reaches them
    where = subprocess.run([python, "-c", "import intact, intact.testing as t; print(intact.__file__); print(t.REPO)"],
                           env=env, cwd=tests, check=True, capture_output=True, text=True).stdout.split()
    assert where == [str(site / "intact" / "__init__.py"), str(site / "intact" / "workflow")], where
    proc = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "."], env=env,
                          cwd=tests, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]
