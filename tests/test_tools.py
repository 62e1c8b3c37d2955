"""Every script in tools/ answers ``--help`` with its usage and does nothing else (a tool that read ``sys.argv``
by hand took ``--help`` for a results folder or a config file)."""

from __future__ import annotations

import runpy
import sys

import pytest

from conftest import REPO

#: tools that cannot run here, and why
NOT_HERE = {"certificate_lirpa.py": "imports auto_LiRPA, which lives in its own virtualenv",
            "pytest_failures_now.py": "a pytest plugin, not a command"}
TOOLS = sorted(p.name for p in (REPO / "tools").glob("*.py") if p.name not in NOT_HERE)


@pytest.mark.parametrize("tool", TOOLS)
def test_a_tool_answers_help_with_its_usage(tool, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [tool, "--help"])
    with pytest.raises(SystemExit) as end:
        runpy.run_path(str(REPO / "tools" / tool), run_name="__main__")
    assert end.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {tool}")
