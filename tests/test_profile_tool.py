"""tools/profile_train_task.py: phases are timed exclusively (a nested phase is not counted twice)."""

from __future__ import annotations

import importlib.util
import types

from conftest import REPO


def _tool():
    spec = importlib.util.spec_from_file_location("profile_train_task", REPO / "tools" / "profile_train_task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nested_phases_are_counted_once(monkeypatch):
    tool = _tool()
    clock = [0.0]
    monkeypatch.setattr(tool.time, "perf_counter", lambda: clock[0])

    def tick(seconds):
        clock[0] += seconds

    owner = types.SimpleNamespace(inner=lambda: tick(2.0), outer=None)
    owner.outer = lambda: (tick(1.0), owner.inner(), tick(0.5))
    phases = tool.Phases()
    phases.wrap(owner, "inner", "inner")
    phases.wrap(owner, "outer", "outer")
    owner.outer()
    owner.inner()
    assert phases.seconds == {"inner": 4.0, "outer": 1.5}
    assert "outer" in tool.table({"phases": phases.seconds, "heavy_imports": []})
