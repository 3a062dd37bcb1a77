"""The version is written once (``syncguard.__version__`` in src/syncguard/__init__.py) and every
reader agrees: the build's metadata, ``syncguard --version`` and ``python -m syncguard --version``.

The expected values come from the installed distribution's metadata and from parsing
pyproject.toml and the source file's syntax tree, never from importing the code under test.
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _literal_in_source(module: str, name: str) -> str:
    """The string assigned to ``name`` at the top level of ``module``'s file under src/."""
    path = ROOT / "src" / Path(*module.split(".")) / "__init__.py"
    if not path.exists():
        path = (ROOT / "src" / Path(*module.split("."))).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    values = [node.value.value for node in tree.body
              if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
              and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]
    assert len(values) == 1, f"{path}: {name} assigned {len(values)} times as a literal"
    return values[0]


def test_pyproject_reads_the_version_from_the_one_source():
    data = _pyproject()
    assert "version" not in data["project"], "a second copy of the version in [project]"
    assert "version" in data["project"]["dynamic"]
    attr = data["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    assert _literal_in_source(module, name) == md.version("syncguard")


@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "syncguard", "--version"],
    ["syncguard", "--version"],
], ids=["python -m syncguard", "console script"])
def test_version_flag_prints_the_installed_metadata_version(command):
    if command[0] == "syncguard":
        script = shutil.which("syncguard", path=str(Path(sys.executable).parent))
        assert script, "the syncguard console script is not installed beside this python"
        command = [script, *command[1:]]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    assert out.stdout == f"syncguard {md.version('syncguard')}\n"
    assert out.stderr == ""


def test_public_version_attribute_matches_the_metadata():
    import syncguard
    assert syncguard.__version__ == md.version("syncguard")
