"""PEP 8 where no linter runs: the methods of syncguard/predict's classes are separated by one
blank line (a method glued to the previous one reads as part of it), and no method follows two
blank lines (pycodestyle's E303, e.g. after a class docstring)."""
from __future__ import annotations

import ast
import os

import pytest

PREDICT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "src", "syncguard", "predict")
FILES = sorted(f for f in os.listdir(PREDICT) if f.endswith(".py"))


def _glued_methods(source: str) -> list[str]:
    """``Class.method`` for each method whose previous method is not followed by exactly one
    blank line, or that follows anything else after more than one (comment lines between them
    are allowed)."""
    lines = source.splitlines()
    out = []
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        for before, method in zip(cls.body, cls.body[1:]):
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            start = min([method.lineno] + [d.lineno for d in method.decorator_list])
            between = lines[before.end_lineno:start - 1]
            blank = [line for line in between if not line.strip()]
            after_method = isinstance(before, (ast.FunctionDef, ast.AsyncFunctionDef))
            if len(blank) > 1 or (after_method and not blank):
                out.append(f"{cls.name}.{method.name}")
    return out


def test_the_check_finds_a_glued_method_and_passes_one_blank_line():
    glued = "class A:\n    def f(self):\n        pass\n    def g(self):\n        pass\n"
    spaced = ("class A:\n    def f(self):\n        pass\n\n    # note\n    @property\n"
              "    def g(self):\n        pass\n")
    docstring_then_two = 'class A:\n    """Doc."""\n\n\n    def f(self):\n        pass\n'
    docstring_then_one = 'class A:\n    """Doc."""\n\n    def f(self):\n        pass\n'
    assert _glued_methods(glued) == ["A.g"]
    assert _glued_methods(spaced) == []
    assert _glued_methods(docstring_then_two) == ["A.f"]
    assert _glued_methods(docstring_then_one) == []


@pytest.mark.parametrize("name", FILES)
def test_methods_are_separated_by_one_blank_line(name):
    with open(os.path.join(PREDICT, name), encoding="utf-8") as f:
        assert _glued_methods(f.read()) == [], name
