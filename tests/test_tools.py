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


#: each tool's file arguments, given a file that does not exist
FILE_ARGUMENTS = [("run_hashes.py", ["nope.yaml"]), ("count_trainable.py", ["--config", "nope.yaml"]),
                  ("check_dependencies.py", ["nope.toml"]), ("profile_train_task.py", ["--config", "nope.yaml"]),
                  ("settings_fuzz.py", ["validation", "nope.yaml"]),
                  ("certificate_width.py", ["--stored", "nope.yaml"]),
                  ("certificate_width.py", ["--alpha", "--lirpa", "nope.yaml"])]


@pytest.mark.parametrize(("tool", "args"), FILE_ARGUMENTS)
def test_a_tool_refuses_a_missing_file_in_one_line(tool, args, monkeypatch, capsys, tmp_path):
    """Before 2026-12-01 four of them ended in a traceback (``LayerError``, ``ConfigError``, ``FileNotFoundError``) and
    ``certificate_width.py --stored`` without ``--alpha`` ignored the file and computed a table for minutes."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [tool, *args])
    with pytest.raises(SystemExit) as end:
        runpy.run_path(str(REPO / "tools" / tool), run_name="__main__")
    assert end.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"{tool}: error: ")
    assert err.splitlines()[-1].endswith(f"no such file: '{args[-1]}'")
