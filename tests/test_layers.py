"""The package's layers (docs/design.md section 2, "Layers") are what the imports follow: every import of an
``intact`` module, function-level ones included, goes to the importer's own layer or a lower one. The order is
read from the page itself, so the page and the code cannot drift apart."""

from __future__ import annotations

import ast
import re

from conftest import REPO

SRC = REPO / "src" / "intact"


def documented_layers() -> dict[str, int]:
    """Top-level module or subpackage of ``intact`` -> its layer number, from the numbered list after **Layers.**"""
    text = (REPO / "docs" / "design.md").read_text()
    block = text[text.index("**Layers.**"):]
    block = block[:block.index("\n\n", block.index("\n1. "))]
    layers: dict[str, int] = {}
    for number, item in re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |\Z)", block[block.index("\n1. ") + 1:], re.S | re.M):
        for name in re.findall(r"`([a-z_]+)/?`", item):
            if (SRC / f"{name}.py").is_file() or (SRC / name / "__init__.py").is_file():
                layers.setdefault(name, int(number))
    return layers


def imports(path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "intact":
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "intact"]
    return out


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "intact"


def test_every_module_is_in_a_documented_layer():
    layers = documented_layers()
    modules = ({p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
               | {p.parent.name for p in SRC.glob("*/__init__.py")})
    assert modules - set(layers) == set(), "add these to docs/design.md section 2, Layers"


def test_imports_follow_the_documented_layers():
    layers = {**documented_layers(), "intact": max(documented_layers().values())}
    upward = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("").parts
        own = rel[1] if len(rel) > 1 and rel[1] != "__init__" else "intact"
        for module in imports(path):
            if layers.get(top(module), 0) > layers.get(own, 0):
                upward.append(f"{path.relative_to(REPO)}: {own} (layer {layers[own]}) imports {module} "
                              f"(layer {layers[top(module)]})")
    assert not upward, "\n".join(upward)
