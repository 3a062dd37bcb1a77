"""Attribution: which line of the user's code a sync belongs to, and in which phase it happened.

One module serves every detector, ``races`` and ``cpupath``, so that "the user's frame" means the
same thing everywhere: the innermost frame outside torch, syncguard and the stdlib glue
(contextlib, warnings, threading, functools).

The phase says whether the user's program made the sync while running (``"run"``), while
torch.compile's Dynamo/Inductor compiled it (``"compile"``, read from the compiler's own
per-thread compile context), or while setting up a CUDA graph capture (``"graph_capture"``,
recognised by the code objects of ``torch.cuda.graph.__enter__`` and ``make_graphed_callables``
on the stack, never by file names). Nothing here calls CUDA: it runs inside CUPTI callbacks, where
a CUDA call can hang, and during stream capture, where most are illegal.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Iterable

from syncguard.records.frame import Frame

RUN, COMPILE, GRAPH_CAPTURE = "run", "compile", "graph_capture"
PHASES = (RUN, COMPILE, GRAPH_CAPTURE)

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # syncguard/
_SKIP_FILES = ("contextlib.py", "warnings.py", "threading.py", "functools.py")
_torch_dir: str | None = None
_internal_cache: dict[str, bool] = {}


def _torch_prefix() -> str | None:
    global _torch_dir
    if _torch_dir is None:
        mod = sys.modules.get("torch")
        if mod is None or not getattr(mod, "__file__", None):
            return None
        _torch_dir = os.path.dirname(os.path.abspath(mod.__file__)) + os.sep
    return _torch_dir


def is_internal(filename: str) -> bool:
    """True for frames that are not the user's: torch, syncguard, stdlib glue, generated code."""
    hit = _internal_cache.get(filename)
    if hit is not None:
        return hit
    if filename.startswith("<"):
        return True  # not cached: "<string>" and friends are cheap to test
    path = os.path.abspath(filename)
    internal = path.startswith(_PKG_DIR) or os.path.basename(path) in _SKIP_FILES
    tdir = _torch_prefix()
    internal = internal or bool(tdir and path.startswith(tdir))
    if tdir is not None:  # before torch is imported the answer may still change
        _internal_cache[filename] = internal
    return internal


@dataclass(frozen=True)
class Site:
    """Where a call was made: the user's frame, and the stack above it (innermost first) as
    structured frames, which the code scope reads without parsing text."""

    filename: str | None = None
    lineno: int | None = None
    function: str | None = None
    stack: tuple[Frame, ...] = ()


def user_frame(frame=None):
    """The innermost frame of the user's code at or above ``frame`` (the caller's by default)."""
    f = frame if frame is not None else sys._getframe(1)
    while f is not None and _code_class(f.f_code):
        f = f.f_back
    return f


#: 32 frames of stack, so that a sync deep inside a library (nn.Module calls add two torch frames
#: each) still reaches the user's code, which the code scope needs (codescope.py). Reports store
#: only the first 8.
STACK_DEPTH = 32


def user_site(frame=None, depth: int = STACK_DEPTH) -> Site:
    """The caller's site, skipping torch and syncguard frames, with the stack above it."""
    return _site_at(user_frame(frame if frame is not None else sys._getframe(1)), depth)


# Per-code-object caches for the hot path (the cuda detector attributes every copy inside a CUPTI
# callback). Neither ever needs invalidating: a code object's co_filename, co_name and
# co_firstlineno are immutable, "internal" depends only on co_filename (and on torch's directory,
# so nothing is cached before torch is imported), and a Site is a frozen value built only from
# the (code, instruction offset) pairs that key it (an offset of a code object always maps to the
# same line). Keys hold offsets (``f_lasti``), not line numbers: ``f_lineno`` decodes the code
# object's line table up to the offset on every read, which in a long function costs more than
# the rest of the callback, while ``f_lasti`` is a field read. Keys use id(code), never the code
# object itself: code objects compare equal across files (CPython's code equality ignores
# co_filename), so the same test function in two files would share an entry, and hashing one
# hashes its bytecode. Each entry holds its code objects alive, so no other object can take their
# ids while it exists. Bounded (cleared when full): generated code, e.g. torch.compile's, may
# create many code objects.
_CACHE_MAX = 4096
_code_cache: dict = {}  # id(code) -> (0 user / 1 internal / 2 graph-capture set-up, code)
_site_cache: dict = {}  # (id(code), lasti, id(code), lasti, ...) up to depth frames -> (Site, codes)


def _code_class(code) -> int:
    hit = _code_cache.get(id(code))
    if hit is not None:
        return hit[0]
    internal = is_internal(code.co_filename)
    cls = (2 if code in _graph_setup_codes() else 1) if internal else 0
    if _torch_dir is not None:  # see is_internal: torch's directory fixes the answer
        if len(_code_cache) >= _CACHE_MAX:
            _code_cache.clear()
        _code_cache[id(code)] = (cls, code)
    return cls


def _site_at(f, depth: int) -> Site:
    """The Site of user frame ``f`` with up to ``depth`` frames of stack; cached by the
    (code, offset) pairs, so a line called again costs a walk of field reads and a dict lookup."""
    if f is None:
        return Site()
    key = []
    g, n = f, depth
    while g is not None and n:
        key.append(id(g.f_code))
        key.append(g.f_lasti)
        g, n = g.f_back, n - 1
    key = tuple(key)
    hit = _site_cache.get(key)
    if hit is not None:
        return hit[0]
    frames = []
    g = f
    while g is not None and len(frames) < depth:
        frames.append((g.f_code, g.f_lineno))
        g = g.f_back
    return _cached_site(_site_cache, key, frames)


def _cached_site(cache: dict, key, frames) -> Site:
    """The Site of ((code, lineno), ...) innermost first, stored under ``key`` with its code
    objects (which keeps every id in the key unique while the entry lives)."""
    code, line = frames[0]
    site = Site(code.co_filename, line, code.co_name,
                tuple(Frame(c.co_filename, n, c.co_name) for c, n in frames))
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = (site, tuple(c for c, _ in frames))
    return site


#: the C callback's Site cache (detectors/cuda/_cuptifast_c/frames.c): a 64-bit hash of the same (code,
#: offset) pairs -> (Site, codes); filled by :func:`site_from_frames` on a miss, the codes held so
#: that no address in a live key can be reused
c_site_cache: dict = {}


def site_from_frames(key: int, frames: tuple) -> Site:
    """The C callback's cache miss: the Site of ((code, lineno), ...), stored under ``key``."""
    return _cached_site(c_site_cache, key, frames)


_PROFILER_FRAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<func>.*)$")


def site_from_profiler_stack(entries: Iterable[str]) -> Site:
    """Profiler stacks read ``file.py(12): func``, innermost first."""
    frames = []
    for entry in entries:
        m = _PROFILER_FRAME.match(entry)
        if m and not is_internal(m["file"]):
            frames.append((m["file"], int(m["line"]), m["func"]))
    if not frames:
        return Site()
    f, line, func = frames[0]
    return Site(f, line, func, tuple(Frame(a, b, c) for a, b, c in frames[:8]))


def is_profiler_frame(name: str) -> bool:
    """Profiler events for Python calls (``file.py(12): f``, ``<built-in method …>``)."""
    return name.startswith("<built-in") or bool(_PROFILER_FRAME.match(name))


# ---------------------------------------------------------------------------------------------
# Phases

_capture_codes: frozenset | None = None


def _graph_setup_codes() -> frozenset:
    """Code objects whose frames on the stack mean "setting up a CUDA graph capture"."""
    global _capture_codes
    if _capture_codes is None:
        graphs = sys.modules.get("torch.cuda.graphs")
        if graphs is None:
            return frozenset()  # torch.cuda.graphs not imported yet: no capture can be under way
        codes = []
        for owner, name in ((getattr(graphs, "graph", None), "__enter__"),
                            (graphs, "make_graphed_callables")):
            fn = getattr(owner, name, None) if owner is not None else None
            fn = getattr(fn, "__wrapped__", fn)
            code = getattr(fn, "__code__", None)
            if code is not None:
                codes.append(code)
        _capture_codes = frozenset(codes)
    return _capture_codes


def compiling() -> bool:
    """Whether this thread is inside a torch.compile compilation (Dynamo tracing or the backend).

    Reads torch's own per-thread ``CompileContext``, which Dynamo holds for a frame's whole
    compilation (tracing, then Inductor). Not ``torch.compiler.is_compiling()``: at run time that
    reads a process-global flag (another thread compiling would mark this thread's syncs), and
    it costs a ``torch.jit.is_scripting()`` call per sync.
    """
    get = _compile_context_getter()
    if get is None:
        return False
    try:
        return get() is not None
    except Exception:
        return False


_try_get = None


def _compile_context_getter():
    """``torch._guards.CompileContext.try_get``, looked up once torch._guards is imported (the
    cuda detector asks per copy; the lookup was a third of the question's cost)."""
    global _try_get
    if _try_get is None:
        guards = sys.modules.get("torch._guards")
        ctx = getattr(guards, "CompileContext", None) if guards is not None else None
        _try_get = getattr(ctx, "try_get", None)
    return _try_get


def compile_context_tls():
    """torch's per-thread store behind ``CompileContext.try_get``, when ``try_get`` is only a
    read of it (``getattr(_TLS, "compile_context", None)``, on every torch checked): the C
    callback then reads the thread's ``compile_context`` itself instead of calling into Python
    per copy. None where torch._guards is not imported or ``try_get`` does anything else."""
    tls = getattr(sys.modules.get("torch._guards"), "_TLS", None)
    code = getattr(_compile_context_getter(), "__code__", None)
    if (tls is None or code is None or code.co_names != ("getattr", "_TLS")
            or not hasattr(tls, "__dict__")):
        return None
    return tls if "compile_context" in code.co_consts else None


_is_compiling = None  # torch's is_compiling, once an eager call found it (see is_tracing)


def is_tracing() -> bool:
    """``torch.compiler.is_compiling()`` on every supported torch (Dynamo constant-folds it)."""
    global _is_compiling
    fn = _is_compiling
    if fn is None:
        # sys.modules, not getattr(torch, ...): torch imports submodules lazily, and an attribute
        # lookup would import one on every call; not imported = not compiling
        comp = sys.modules.get("torch.compiler")
        fn = getattr(comp, "is_compiling", None)
        if fn is None:
            dyn = sys.modules.get("torch._dynamo")
            fn = getattr(dyn, "is_compiling", None)
            if fn is None:
                return False
    try:
        out = bool(fn())
    except Exception:
        return False
    if not out and _is_compiling is None:
        # kept only from an eager call (never stored while Dynamo traces this): every region's
        # entry and allow() asks, and the two lookups were part of a cold entry's cost
        _is_compiling = fn
    return out


def current_phase(frame=None) -> str:
    """The phase of the sync being made now on this thread (see the module docstring).

    Capture set-up is found between the sync and the user's frame (the user's ``with
    torch.cuda.graph(g):`` calls ``__enter__``, which syncs), so only torch's frames are walked.
    """
    return site_and_phase(frame if frame is not None else sys._getframe(1), site=False)[1]


def site_and_phase(frame, site: bool = True, depth: int = STACK_DEPTH) -> tuple[Site | None, str]:
    """:func:`user_site` and :func:`current_phase` in one walk up the stack (the cuda detector
    calls this inside CUPTI callbacks, where every microsecond is paid per copy)."""
    phase = COMPILE if compiling() else RUN
    f = frame
    cache = _code_cache
    while f is not None:
        code = f.f_code
        hit = cache.get(id(code))
        cls = hit[0] if hit is not None else _code_class(code)
        if not cls:
            break
        if cls == 2 and phase == RUN:
            phase = GRAPH_CAPTURE
        f = f.f_back
    if not site:
        return None, phase
    return _site_at(f, depth), phase
