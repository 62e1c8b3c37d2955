"""tools/profile_train_task.py: phases are timed exclusively (a nested phase is not counted twice)."""

from __future__ import annotations

import types

from conftest import load_tool


def test_nested_phases_are_counted_once(monkeypatch):
    tool = load_tool("profile_train_task")
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
