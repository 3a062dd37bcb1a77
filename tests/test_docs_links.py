"""Every relative link of README.md, docs/, lab/README.md and reports/README.md names a file or
folder of the tree, so moving or deleting one (as the probes and the archive were) cannot leave
a dead link behind, and README.md stays within its length for users."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "lab" / "README.md", ROOT / "reports" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def dead_links(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [t for t in _LINK.findall(text)
            if "://" not in t and not (page.parent / t).resolve().exists()]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert not dead_links(page)


def test_a_dead_link_is_caught(tmp_path):
    (tmp_path / "there.md").write_text("x")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok too](there.md#a) [web](https://example.org/x) [gone](gone.md)")
    assert dead_links(page) == ["gone.md"]


def test_the_readme_is_at_most_250_lines():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
