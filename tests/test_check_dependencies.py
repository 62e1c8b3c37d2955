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


def test_an_exact_pin_is_met_by_a_build_with_a_local_label(tmp_path, monkeypatch):
    """PEP 440: ``torch==2.14.1`` is met by ``2.14.1+cu130`` (a CUDA build's version), not by ``2.14.0+cu130``."""
    tool = load_tool("check_dependencies")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["torch==2.14.1"]\n')
    for installed, expected in (("2.14.1+cu130", "dependencies: all 1 declared present, every exact pin met"),
                                ("2.14.0+cu130", "pins not met: torch 2.14.0+cu130 (pinned 2.14.1)")):
        monkeypatch.setattr(tool.metadata, "version", lambda name, v=installed: v)
        assert tool.report(pyproject) == [expected]
