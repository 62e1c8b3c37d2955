"""The package's one build step beyond pyproject.toml: a wheel ships the workflow inside the package.

``intact/workflow/`` in the wheel holds the Snakefile, ``config.yaml``, ``envs/`` and ``workflow/`` (rules,
scripts, report captions) as the checkout lays them out, so :mod:`intact.testing` runs the same workflow from a
non-editable install (``pip install .``); an editable install reads the checkout's own files.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

#: what the Snakefile reads beside the package, relative to the checkout (and to intact/workflow/ in a wheel)
WORKFLOW_FILES = ("Snakefile", "config.yaml", "envs", "workflow")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        here, target = Path(__file__).resolve().parent, Path(self.build_lib) / "intact" / "workflow"
        for name in WORKFLOW_FILES:
            source = here / name
            if source.is_dir():
                shutil.copytree(source, target / name, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / name)


setup(cmdclass={"build_py": BuildPy})
