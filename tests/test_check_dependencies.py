"""tools/check_dependencies.py (the GPU check's first lines): every declared dependency read, the missing ones and
the unmet exact pins named."""

from __future__ import annotations

from importlib import metadata

from conftest import REPO, load_tool


def test_it_reads_every_group_of_the_projects_dependencies():
    names = {(group, name) for group, name, _ in load_tool("check_dependencies").requirements(REPO / "pyproject.toml")}
    assert {("project", "torch"), ("project", "jsonschema"), ("workflow", "snakemake"), ("workflow", "mlflow"),
            ("dev", "pytest")} <= names


def test_it_names_what_is_missing_and_the_pins_not_met(tmp_path):
    tool = load_tool("check_dependencies")
    pyyaml, pytest_version = metadata.version("pyyaml"), metadata.version("pytest")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f"""[project]
dependencies = ["no-such-distribution-xyz>=1", "pyyaml==0.0.1 ; python_version > '3'"]
[project.optional-dependencies]
dev = ["pytest[testing]=={pytest_version}"]
""")
    assert tool.report(pyproject) == ["dependencies missing: no-such-distribution-xyz (project)",
                                      f"pins not met: pyyaml {pyyaml} (pinned 0.0.1)"]
    pyproject.write_text(f'[project]\ndependencies = ["pytest=={pytest_version}", "pyyaml>=1"]\n')
    assert tool.report(pyproject) == ["dependencies: all 2 declared present, every exact pin met"]
