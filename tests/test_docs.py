"""The README stays short, the reference pages total under 150 KB, and every page of docs/ is reachable: links
and their #anchors resolve, the index lists every page and the log, the log's README lists every entry."""

from __future__ import annotations

import re
from collections import Counter

from conftest import REPO

DOCS = REPO / "docs"
LOG = DOCS / "log"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")
ANCHOR = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted(LOG.glob("*.md"))]


def _links(page):
    """Relative links of a Markdown page (external URLs and in-page anchors left out)."""
    return [m.group(1) for m in LINK.finditer(page.read_text()) if not re.match(r"[a-z]+:", m.group(1))]


def test_readme_is_at_most_10_kb_and_links_to_the_docs_index():
    readme = REPO / "README.md"
    assert readme.stat().st_size <= 10 * 1024, readme.stat().st_size
    assert "docs/index.md" in _links(readme)


def test_every_relative_link_resolves():
    broken = [f"{page.relative_to(REPO)} -> {target}"
              for page in PAGES for target in _links(page) if not (page.parent / target).exists()]
    assert not broken, broken


def _anchors(page):
    """The anchors GitHub gives a page's headings (fenced code left out): a heading's text (a link's text, not its
    target) lower-cased, all but letters, digits, ``_``, ``-`` and spaces dropped, spaces as ``-``; a repeated
    heading gets ``-1``, ``-2``..."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    seen: Counter[str] = Counter()
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", heading).lower()).replace(" ", "-")
        out.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return out


def test_every_anchor_resolves():
    """A link's #anchor names a heading of the page it points to, so renaming a heading breaks no link silently."""
    broken = []
    for page in PAGES:
        for path, anchor in ANCHOR.findall(page.read_text()):
            target = page.parent / path if path else page
            if target.suffix == ".md" and target.exists() and anchor not in _anchors(target):
                broken.append(f"{page.relative_to(REPO)} -> {path}#{anchor}")
    assert not broken, broken


def test_the_index_lists_every_page():
    listed = set(_links(DOCS / "index.md"))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages <= listed, sorted(pages - listed)
    assert "log/README.md" in listed


def test_the_log_is_one_dated_file_per_entry_and_its_readme_lists_them_all():
    entries = {p.name for p in LOG.glob("*.md")} - {"README.md"}
    assert entries
    undated = sorted(name for name in entries if not re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", name))
    assert not undated, undated
    listed = set(_links(LOG / "README.md"))
    assert entries <= listed, sorted(entries - listed)


def test_the_one_job_page_names_at_most_15_files_and_each_exists():
    """docs/one-job.md follows a train_task job from its rule to its files (issue 31 item 7): a reader opens at
    most 15 files, and every one it names is there."""
    text = (DOCS / "one-job.md").read_text()
    named = set(re.findall(r"`((?:src|workflow)/[\w/.]+\.(?:py|smk))`", text))
    assert 0 < len(named) <= 15, sorted(named)
    assert [p for p in sorted(named) if not (REPO / p).is_file()] == []


def test_the_reference_pages_total_under_150_kb():
    """The reference pages (docs/*.md; the log does not count) stay readable in an evening (issue 31 item 7)."""
    sizes = {page.name: page.stat().st_size for page in DOCS.glob("*.md")}
    largest = ", ".join(f"{name} {size:,}" for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:5])
    assert sum(sizes.values()) < 150_000, f"docs/*.md total {sum(sizes.values()):,} bytes; the largest: {largest}"


def test_the_version_is_the_changelogs_latest_and_the_packages():
    """pyproject.toml's version is intact.__version__ and the newest numbered section of CHANGELOG.md."""
    import intact

    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)[1]
    latest = re.search(r"^## (\d+\.\d+\.\d+)", (REPO / "CHANGELOG.md").read_text(), re.M)[1]
    assert version == intact.__version__ == latest
