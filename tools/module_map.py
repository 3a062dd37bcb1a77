"""docs/architecture.md's module map, generated from the tree of ``src/syncguard/``.

    python tools/module_map.py           # exit 1 when the map differs from the tree
    python tools/module_map.py --write   # rewrite it (what `nox -s docs` runs)

One row per module (``.py`` and ``.c``, package ``__init__`` files included) in path order,
between ``<!-- modules -->`` and ``<!-- /modules -->``. The second column is the first line of
the module's docstring (a C file's first comment), so the map says what each module says of
itself: a module split or renamed only needs the map regenerated, never retyped.
tests/test_module_map.py fails when a row names a module that is gone or a module has no row.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "syncguard"
DOC = ROOT / "docs" / "architecture.md"
SUFFIXES = (".py", ".c")
_BLOCK = re.compile(r"(<!-- modules -->\n)(?:.*?\n)?(<!-- /modules -->)", re.S)


def modules(package: Path = PACKAGE) -> list[str]:
    """Every module of the package, as a path relative to ``package``, sorted."""
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*")
                  if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts)


def summary(path: Path) -> str:
    """What the module says of itself in its first docstring or comment line."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(text)) or ""
    else:
        found = re.search(r"/\*(.*?)\*/", text, re.S)
        doc = found[1] if found else ""
    paragraph = doc.strip().split("\n\n")[0]
    line = " ".join(part.strip(" *") for part in paragraph.splitlines()).strip()
    return line.replace("|", "\\|") or "(no docstring)"


def table(package: Path = PACKAGE) -> str:
    rows = ["| module | what it says it does |", "|---|---|"]
    rows += [f"| `{m}` | {summary(package / m)} |" for m in modules(package)]
    return "\n".join(rows)


def table_modules(text: str) -> list[str]:
    """The modules the doc's map names, in its order."""
    found = _BLOCK.search(text)
    if not found:
        raise SystemExit("docs/architecture.md has no <!-- modules --> block")
    return re.findall(r"^\| `([^`]+)` \|", found[0], re.M)


def render(text: str, package: Path = PACKAGE) -> str:
    if not _BLOCK.search(text):
        raise SystemExit("docs/architecture.md has no <!-- modules --> block")
    return _BLOCK.sub(lambda m: m[1] + table(package) + "\n" + m[2], text)


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    new = render(text)
    if "--write" in argv:
        if new != text:
            DOC.write_text(new, encoding="utf-8")
        print("docs/architecture.md: module map up to date with src/syncguard/")
        return 0
    if new != text:
        print("docs/architecture.md's module map differs from src/syncguard/: run "
              "`python tools/module_map.py --write`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
