"""The README stays short and every page of docs/ is reachable: links resolve, the index lists every page."""

from __future__ import annotations

import re

from conftest import REPO

DOCS = REPO / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def _links(page):
    """Relative links of a Markdown page (external URLs and in-page anchors left out)."""
    return [m.group(1) for m in LINK.finditer(page.read_text()) if not re.match(r"[a-z]+:", m.group(1))]


def test_readme_is_at_most_10_kb_and_links_to_the_docs_index():
    readme = REPO / "README.md"
    assert readme.stat().st_size <= 10 * 1024, readme.stat().st_size
    assert "docs/index.md" in _links(readme)


def test_every_relative_link_resolves():
    broken = [f"{page.relative_to(REPO)} -> {target}"
              for page in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
              for target in _links(page) if not (page.parent / target).exists()]
    assert not broken, broken


def test_the_index_lists_every_page():
    listed = set(_links(DOCS / "index.md"))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages <= listed, sorted(pages - listed)
