"""Which of intact's declared dependencies this Python lacks, and which exact pins it does not meet: the GPU
check's first lines (tools/gpu_check.sh), so that a test failing there for a missing package (MLflow,
Snakemake) or a numerics difference from another torch is read as what it is.

    python tools/check_dependencies.py [pyproject.toml]

Reads ``[project] dependencies`` and every optional-dependency group. Prints one line each for the missing
distributions and the unmet ``==`` pins (or that there are none); exits 0 either way: the check informs.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from importlib import metadata
from pathlib import Path

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*?)\s*(?:;.*)?$")


def requirements(pyproject: Path) -> list[tuple[str, str, str]]:
    """(group, name, version specifier) of every declared dependency: ``project`` or the extra's name."""
    project = tomllib.loads(pyproject.read_text())["project"]
    groups = {"project": project.get("dependencies", []), **project.get("optional-dependencies", {})}
    out = []
    for group, reqs in groups.items():
        for req in reqs:
            m = REQUIREMENT.match(req)
            if m:
                out.append((group, m[1], m[2]))
    return out


def report(pyproject: Path) -> list[str]:
    """The lines: missing distributions, unmet exact pins, or that all are present."""
    missing, unmet = [], []
    reqs = requirements(pyproject)
    for group, name, spec in reqs:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(f"{name} ({group})")
            continue
        pin = spec.removeprefix("==") if spec.startswith("==") else None
        local = version if pin is None or "+" in pin else version.partition("+")[0]  # ==2.1 matches 2.1+cu130
        if pin is not None and local != pin:
            unmet.append(f"{name} {version} (pinned {pin})")
    lines = [f"dependencies missing: {', '.join(missing)}"] if missing else []
    lines += [f"pins not met: {', '.join(unmet)}"] if unmet else []
    return lines or [f"dependencies: all {len(reqs)} declared present, every exact pin met"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pyproject", nargs="?", type=Path, default=Path("pyproject.toml"))
    pyproject = parser.parse_args(argv).pyproject
    if not pyproject.is_file():  # the one check that cannot use intact.cli.existing_file: intact may not import yet
        parser.error(f"no such file: {str(pyproject)!r}")
    print("\n".join(report(pyproject)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
