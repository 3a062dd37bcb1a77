"""The package's comments and docstrings say what and why, never when or how much.

Two rules, each over ``src/syncguard/**`` (.py, .c, .h):

* no commit of this repository named by a 7-to-40 hex token (also checked in README.md): history
  belongs in commit messages and docs/. A hex token that names no commit (a pointer in an
  example, a made-up id in a test string) is fine; ``git rev-parse --verify --quiet TOKEN^{commit}``
  decides, so the test skips where there is no git history to ask.
* no measured figure in a comment or docstring: a number followed by ``x``/``×``/``ms``/``µs``/
  ``us``/``ns``/``%``, or "N of M runs/processes/rounds". Comments come from ``tokenize`` (C:
  ``/* */`` and ``//``), docstrings from ``ast`` (module, class, function); string literals the
  code uses are not text a reader is told, so they are not scanned.

"""
from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "syncguard"
SUFFIXES = (".py", ".c", ".h")

_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
_FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:×|x\b|ms\b|µs\b|us\b|ns\b|%)"
                     r"|\b\d+ of \d+ (?:runs|processes|rounds)\b")

#: (module, commit token) pairs still in the package; others are removing them
def _modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.rglob("*") if p.suffix in SUFFIXES and p.is_file()
                  and "__pycache__" not in p.parts)


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring line of a module."""
    src = path.read_text(encoding="utf-8")
    out = []
    if path.suffix == ".py":
        out += [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(src).readline)
                if t.type == tokenize.COMMENT]
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                first = node.body[0] if node.body else None
                if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                        and isinstance(first.value.value, str)):
                    out += [(first.lineno + i, line)
                            for i, line in enumerate(first.value.value.splitlines())]
    else:
        for m in re.finditer(r"/\*.*?\*/|//[^\n]*", src, re.S):
            start = src.count("\n", 0, m.start()) + 1
            out += [(start + i, line) for i, line in enumerate(m[0].splitlines())]
    return out


def figures(path: Path) -> list[tuple[int, str]]:
    """(line, figure) of each measured figure in a module's comments and docstrings."""
    return [(line, m[0]) for line, text in prose(path) for m in _FIGURE.finditer(text)]


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def _history() -> bool:
    try:
        return _git("rev-parse", "--verify", "--quiet", "HEAD^{commit}").returncode == 0
    except OSError:
        return False


def commits_named(text: str) -> list[str]:
    """The hex tokens of ``text`` that name a commit of this repository, in order, once each."""
    return [t for t in dict.fromkeys(_HEX.findall(text))
            if _git("rev-parse", "--verify", "--quiet", f"{t}^{{commit}}").returncode == 0]


needs_git = pytest.mark.skipif(not _history(), reason="no git history here to tell a commit "
                               "hash from any other hex token")


@needs_git
def test_the_readme_names_no_commit():
    named = commits_named((ROOT / "README.md").read_text(encoding="utf-8"))
    assert not named, f"README.md names commit(s) {named}: history belongs in docs/"


@needs_git
def test_the_package_names_no_commit():
    found = {(p.relative_to(PACKAGE).as_posix(), t) for p in _modules()
             for t in commits_named(p.read_text(encoding="utf-8"))}
    assert not found, f"commit hashes in the package (history belongs in commit messages): {sorted(found)}"


def test_the_package_states_no_measured_figure():
    where = [f"{p.relative_to(PACKAGE).as_posix()}:{line}: {fig}" for p in _modules()
             for line, fig in figures(p)]
    assert not where, "measured figures in the package's comments/docstrings:\n" + "\n".join(where)


# -- each rule can fail: the same functions on planted text -------------------------------------

@needs_git
def test_a_planted_commit_hash_is_caught(tmp_path):
    head = _git("rev-parse", "HEAD").stdout.strip()
    module = tmp_path / "mod.py"
    module.write_text(f'"""Fixed in {head[:7]}."""\nPOINTER = 0xdeadbeef  # not a commit: deadbeef\n')
    assert commits_named(module.read_text()) == [head[:7]]
    assert commits_named(f"see {head} and {head[:12]}") == [head, head[:12]]
    assert commits_named("deadbeef 0000000 ffffffffff") == []  # hex, but no commit of this repo


@pytest.mark.parametrize("text, figure", [
    ("# costs 1.04x the bare loop", "1.04x"), ("# ~3 us per call", "3 us"),
    ('"""took 0.08 ms cold."""', "0.08 ms"), ("# 13 µs a sync", "13 µs"),
    ("# a ~4% cost", "4%"), ("# 2.5× slower", "2.5×"),
    ("# crashed in 4 of 4 processes", "4 of 4 processes"),
])
def test_a_planted_figure_is_caught_in_a_comment_or_docstring(tmp_path, text, figure):
    module = tmp_path / "mod.py"
    module.write_text(f"{text}\nX = 1\n", encoding="utf-8")
    assert [fig for _, fig in figures(module)] == [figure]


def test_figures_in_code_and_plain_numbers_are_not_figures(tmp_path):
    module = tmp_path / "mod.py"
    module.write_text('"""Keeps 32 frames of a 2x2 grid at 0x10."""\n'
                      'LABEL = "1.05x"  # a string the code prints is not prose\n'
                      'def f():\n    """One call per 100 merges."""\n', encoding="utf-8")
    assert figures(module) == []
    c_file = tmp_path / "mod.c"
    c_file.write_text("/* cost ~40 ns\n * per read */\nint x = 5; // 2x faster\n", encoding="utf-8")
    assert figures(c_file) == [(1, "40 ns"), (3, "2x")]


def test_a_planted_figure_in_a_copy_of_the_package_fails_the_rule(tmp_path):
    """A tmp copy of one real module with one figure added: the count the ratchet compares grows."""
    real = PACKAGE / "testing.py"
    copy = tmp_path / "testing.py"
    copy.write_text(real.read_text(encoding="utf-8") + "\n# measured: ~7 us per call\n",
                    encoding="utf-8")
    assert len(figures(copy)) == len(figures(real)) + 1
