"""docs/architecture.md's module map has one row per module of src/syncguard/ and none for a
module that is gone. The tree is read here (not the generator's list), so a module added, split
or removed fails until `python tools/module_map.py --write` regenerates the map."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "syncguard"


def _map():
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "tools" / "module_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(package: Path) -> list[str]:
    return sorted(str(p.relative_to(package)).replace("\\", "/") for p in package.rglob("*")
                  if p.is_file() and p.suffix in (".py", ".c") and "__pycache__" not in p.parts)


def test_the_map_has_one_row_per_module_of_the_tree():
    rows = _map().table_modules((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert len(rows) == len(set(rows)), "a module has two rows"
    tree = _tree(PACKAGE)
    missing, gone = sorted(set(tree) - set(rows)), sorted(set(rows) - set(tree))
    assert not missing and not gone, (f"modules without a row: {missing}; rows for modules that "
                                      f"are gone: {gone}: run `python tools/module_map.py --write`")


def test_a_module_added_or_removed_is_caught(tmp_path):
    """A made-up package: the map written for it, then the tree changed under it."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The package."""\n')
    (pkg / "sub" / "a.py").write_text('"""Does a | b.\n\nDetails."""\n')
    (pkg / "fast.c").write_text("/* The C half,\n * on two lines. */\nint x;\n")
    mm = _map()
    doc = mm.render("<!-- modules -->\n<!-- /modules -->\n", pkg)
    assert mm.table_modules(doc) == _tree(pkg) == ["__init__.py", "fast.c", "sub/a.py"]
    assert "| `sub/a.py` | Does a \\| b. |" in doc and "| `fast.c` | The C half, on two lines. |" in doc
    (pkg / "sub" / "a.py").unlink()
    (pkg / "sub" / "b.py").write_text('"""B."""\n')
    assert mm.table_modules(doc) != _tree(pkg)
    assert mm.table_modules(mm.render(doc, pkg)) == _tree(pkg)


def test_a_doc_without_the_block_is_an_error():
    with pytest.raises(SystemExit, match="modules"):
        _map().table_modules("# no map\n")
