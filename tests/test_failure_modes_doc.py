"""docs/failure-modes.md: at least 20 rows, each backed by a named test that exists."""

import ast
import re

from conftest import REPO


def test_every_failure_mode_row_names_existing_tests():
    rows = [line for line in (REPO / "docs/failure-modes.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith(("| bad input", "| fault"))]
    assert len(rows) >= 20, len(rows)
    defined: dict[str, set[str]] = {}
    for path in (REPO / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        defined[path.name] = {n.name for n in ast.walk(tree)
                              if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    for row in rows:
        refs = re.findall(r"`(test_\w+\.py)::(test_\w+)`", row)
        assert refs, f"row without a test: {row}"
        for file, name in refs:
            assert name in defined.get(file, set()), f"{file}::{name} does not exist (row: {row[:80]})"
