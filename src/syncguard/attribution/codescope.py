"""Scope by code location: which of a test's syncs are the project's, and which frame they count at.

Why: on a real suite most syncs come from the *test's own* code (``print(f"{t=}")`` on a CUDA
tensor, ``assert_close``, benchmark helpers calling ``torch.cuda.synchronize()``), and they bury
the ones the user cares about, those made by the package under test or by libraries it calls.

The rule is one pure function over an event's frames (:func:`attribute`), so it does not depend on
how a detector collected them: a sync counts against a test when any frame of its stack lies
inside the scope; it counts at the innermost such frame. A sync with no frame at all cannot be
placed and always counts: syncguard never hides a sync it cannot place.

Inside a scope, the most specific path decides: ``--syncguard-scope=src`` with
``--syncguard-ignore=src/pkg/testing`` leaves the testing helpers out. A library folder
(``site-packages``, ``dist-packages``, the standard library) is outside every scope unless the
scope names a path inside it (``--syncguard-scope=transformers``).

For a sync made inside a third-party library the attribution also names the frame where the
program entered that library and the innermost frame of the user's own code; the scope decides
which one the sync counts at (``--syncguard-scope=mypkg``: the user frame;
``--syncguard-scope=transformers``: the library's own line).

:func:`resolve` and :func:`default_scope` turn option text into a :class:`CodeScope`; they are
the only functions here that look at the file system or the import system.
"""
from __future__ import annotations

import fnmatch
import functools
import importlib.util
import os
import re
import sysconfig
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from syncguard.records.frame import Frame, parse_frame  # noqa: F401  (Frame: importable here)

EVERYTHING = "*"
LIBRARY_DIRS = ("site-packages", "dist-packages")
#: folder names never taken for the project's package by the default scope
NOT_THE_PACKAGE = ("tests", "test", "testing", "docs", "doc", "examples", "benchmarks", "build",
                   "dist")
CONFTEST = "conftest.py"
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def frames_of(filename: str | None, lineno: int | None, function: str | None,
              stack: Iterable[Frame | str]) -> tuple[Frame, ...]:
    """An event's frames, innermost first: its stack, or its one attributed frame. A stack holds
    :class:`Frame` records (text was parsed where it was read, see SyncEvent); text left in one
    is no frame and is skipped, so nothing here parses."""
    frames = tuple(f for f in stack if isinstance(f, Frame))
    if not frames and filename:
        frames = (Frame(filename, lineno or 0, function or "?"),)
    return frames


def _norm(path: str) -> str:
    return os.path.normcase(os.path.abspath(path))


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip(os.sep) + os.sep)


def library_root(path: str, stdlib: Sequence[str] = ()) -> str | None:
    """The library folder ``path`` lies in (``…/site-packages``, the stdlib), or None."""
    parts = path.split(os.sep)
    for i in range(len(parts) - 1, -1, -1):  # innermost: a venv inside site-packages is rare
        if parts[i] in LIBRARY_DIRS:
            return os.sep.join(parts[:i + 1])
    return next((r for r in stdlib if _under(path, r)), None)


def library_name(path: str, stdlib: Sequence[str] = ()) -> str | None:
    """The top-level package (or module) of a library file: ``transformers`` for
    ``…/site-packages/transformers/models/x.py``; None for the user's own code."""
    root = library_root(path, stdlib)
    if root is None:
        return None
    first = path[len(root):].lstrip(os.sep).split(os.sep, 1)[0]
    return first[:-3] if first.endswith(".py") else first


@dataclass(frozen=True)
class CodeScope:
    """Paths whose syncs count. All paths absolute and normalised (see :func:`resolve`)."""

    include: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    ignore_names: tuple[str, ...] = ()  # basename patterns left out (the default: test files)
    stdlib: tuple[str, ...] = ()  # library folders besides site-/dist-packages
    everything: bool = False
    #: one line for the session report's options.scope, which the gate compares (baseline.py):
    #: what the scope is, never where it was given, so that one scope set on the command line
    #: and in the ini reads the same to the gate
    text: str = ""
    source: str = ""  # where the scope was given (a flag, an ini key and file); "" by default
    ignore_source: str = ""  # where the ignored names were given; "" when none were

    @property
    def described(self) -> str:
        """The scope for a summary line or a note: the text with where each part was given, the
        scope's after its entries, the ignored names' after them."""
        entries, sep, ignored = self.text.partition(IGNORING)
        return (entries + (f" ({self.source})" if self.source else "") + sep + ignored
                + (f" ({self.ignore_source})" if ignored and self.ignore_source else ""))

    def contains(self, filename: str) -> bool:
        """Whether a frame in ``filename`` is inside the scope (the most specific path decides)."""
        return self.everything or _contains(self, filename)


@functools.lru_cache(maxsize=8192)
def _contains(scope: CodeScope, filename: str) -> bool:
    if filename.startswith("<"):
        return False  # generated code (<string>, <frozen ...>) lies in no folder
    path = _norm(filename)
    base = os.path.basename(path)
    if any(fnmatch.fnmatch(base, pattern) for pattern in scope.ignore_names):
        return False
    best, inside = -1, False
    for prefix in scope.include:
        if _under(path, prefix) and len(prefix) > best:
            best, inside = len(prefix), True
    lib = library_root(path, scope.stdlib)
    for prefix in scope.ignore + ((lib,) if lib else ()):
        if _under(path, prefix) and len(prefix) >= best:
            best, inside = len(prefix), False
    return inside


EVERYWHERE = CodeScope(everything=True, text="everything (every sync counts)")


@dataclass(frozen=True)
class Attribution:
    """Where one sync counts, and the two frames that explain a sync inside a library."""

    in_scope: bool
    counted: Frame | None  # the innermost frame inside the scope (None: outside, or unplaced)
    user: Frame | None  # the innermost frame of the user's own code (outside every library)
    entry: Frame | None  # the outermost frame of the library the sync was made in, below ``user``


def attribute(frames: Sequence[Frame], scope: CodeScope) -> Attribution:
    """Decide where a sync with these frames (innermost first) counts. Pure: no IO."""
    if not frames:
        return Attribution(True, None, None, None)  # unplaced: counted, never hidden
    user = entry = None
    lib = library_name(_norm(frames[0].filename), scope.stdlib)
    for f in frames:
        name = library_name(_norm(f.filename), scope.stdlib)
        if name is None:
            user = f
            break
        if lib is not None and name == lib:
            entry = f
    counted = next((f for f in frames if scope.contains(f.filename)), None)
    return Attribution(counted is not None, counted, user, entry)


# ---------------------------------------------------------------------------------------------
# From option text to a CodeScope: the only impure part.

def _stdlib() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(sorted({_norm(paths[k]) for k in ("stdlib", "platstdlib") if paths.get(k)}))


def split_list(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"a, b"`` or ``["a", "b,c"]`` -> ``("a", "b", "c")``."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    return tuple(p.strip() for item in items for p in str(item).split(",") if p.strip())


def split_names(value: Any, where: str) -> tuple[str, ...]:
    """:func:`split_list` of an argument that must be a string or an iterable of strings;
    TypeError naming ``where`` for anything else (``None``, a number, bytes: ``b"cuda"`` had
    been read as the detectors ``99, 117, 100, 97``)."""
    if isinstance(value, str):
        return split_list(value)
    items = list(value) if isinstance(value, Iterable) and not isinstance(
        value, (bytes, bytearray)) else None
    if items is None or not all(isinstance(x, str) for x in items):
        raise TypeError(f"{where} must be a comma-separated str or an iterable of str, "
                        f"got {value!r}")
    return split_list(items)


def _locate(entry: str, rootdir: Path, where: str) -> tuple[str, ...]:
    """A path (relative to ``rootdir``) or an importable package name -> absolute paths."""
    path = Path(entry).expanduser()
    path = path if path.is_absolute() else rootdir / path
    if path.exists():
        return (_norm(str(path)),)
    found = _package_paths(entry) if _DOTTED.match(entry) else ()
    if found:
        return found
    raise ValueError(f"{where}: {entry!r} is neither a path (under {rootdir}) nor an importable "
                     "package")


def _package_paths(name: str) -> tuple[str, ...]:
    """Where an importable package (or module) lives, found without importing it: only the
    top-level name is located by the import system (``find_spec`` of a top-level name imports
    nothing); ``a.b`` is then looked up in ``a``'s folders, so no package code runs at start-up."""
    top, _, rest = name.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return ()
    if spec is None:
        return ()
    folders = list(spec.submodule_search_locations or ())
    if not rest:
        if folders:
            return tuple(_norm(p) for p in folders)
        return (_norm(spec.origin),) if spec.origin and os.path.exists(spec.origin) else ()
    out = []
    for folder in folders:
        path = Path(folder, *rest.split("."))
        if path.is_dir():
            out.append(_norm(str(path)))
        elif path.with_suffix(".py").is_file():
            out.append(_norm(str(path.with_suffix(".py"))))
    return tuple(out)


def resolve(scope: Sequence[str], ignore: Sequence[str], rootdir: Path,
            test_patterns: Sequence[str] = (), where: str = "--syncguard-scope", *,
            scope_from: str | None = None, ignore_from: str | None = None) -> CodeScope:
    """The scope named by options; ``scope`` empty means :func:`default_scope`.

    ``scope_from``/``ignore_from`` name where the entries came from (the flag, or an ini key
    and its file): an error about a bad entry starts with it, and the scope's ``shown`` text
    says it; ``where`` and its ``ignore`` twin stand in for them when not given. The scope's
    ``text``, which the report records for the gate, names no source.

    Raises ValueError (one line) for an entry that is neither a path nor a package.
    """
    if EVERYTHING in scope:
        return replace(EVERYWHERE, source=scope_from or where)
    ignore_from = ignore_from or where.replace("scope", "ignore")
    ignored = tuple(p for e in ignore for p in _locate(e, rootdir, ignore_from))
    ignore_source = ignore_from if ignore else ""
    if not scope:
        base = default_scope(rootdir, test_patterns)
        if base.everything:
            return base
        return CodeScope(base.include, base.ignore + ignored, base.ignore_names, base.stdlib,
                         text=base.text + _ignore_text(ignore), ignore_source=ignore_source)
    include = tuple(p for e in scope for p in _locate(e, rootdir, scope_from or where))
    return CodeScope(include, ignored, (), _stdlib(),
                     text=", ".join(scope) + _ignore_text(ignore), source=scope_from or where,
                     ignore_source=ignore_source)


IGNORING = "; ignoring "  # what a scope's text says before the names it leaves out


def _ignore_text(ignore: Sequence[str]) -> str:
    return f"{IGNORING}{', '.join(ignore)}" if ignore else ""


def _is_package(path: Path) -> bool:
    """A folder with an ``__init__.py``; one that cannot be read (a root-owned volume under the
    rootdir, EACCES) is not, where Path.exists() raised and stopped pytest with an INTERNALERROR
    in runs that audit nothing."""
    try:
        return path.is_dir() and (path / "__init__.py").exists()
    except OSError:
        return False


def default_scope(rootdir: Path, test_patterns: Sequence[str] = ()) -> CodeScope:
    """The project's own package(s) under ``rootdir``, without its test files and conftest.

    ``src/`` when it exists; otherwise every top-level folder with an ``__init__.py`` (except
    tests, docs, examples…); otherwise, with nothing to tell the project's code from its tests,
    everything, as syncguard did before scopes existed. Test files are the basenames matching
    pytest's ``python_files`` (``test_*.py``, ``*_test.py``), plus ``conftest.py``.
    """
    src = rootdir / "src"
    names = tuple(test_patterns or ("test_*.py", "*_test.py")) + (CONFTEST,)
    if src.is_dir():
        include, text = (_norm(str(src)),), "src/"
    else:
        pkgs = sorted(p for p in rootdir.iterdir() if _is_package(p)
                      and p.name not in NOT_THE_PACKAGE and not p.name.startswith("."))
        if not pkgs:
            return CodeScope(everything=True, text="everything: no src/ or top-level package under "
                             f"{rootdir} (set --syncguard-scope)")
        include, text = tuple(_norm(str(p)) for p in pkgs), ", ".join(f"{p.name}/" for p in pkgs)
    return CodeScope(include, (), names, _stdlib(),
                     text=f"{text} (default; test files and conftest.py outside)")
