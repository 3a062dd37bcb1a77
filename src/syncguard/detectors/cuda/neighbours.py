"""Other CUPTI tools in this process: whether one holds (or will hold) CUPTI before the cuda
detector asks for it, and the reason a region then gives.

CUPTI takes one subscriber per process before 13.2, and its own documentation says
``cuptiSubscribe`` answers ``CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`` when the program
runs under Nsight Systems, Nsight Compute, cuda-gdb or compute-sanitizer. Such a tool is loaded
by the CUDA driver from ``CUDA_INJECTION64_PATH`` (or preloaded by its launcher) and subscribes
first. Subscribing beside it would at best be refused and at worst change what that tool
records, so the cuda detector steps aside with a reason that names the tool, and the region
falls back (its report and the test's ``weaker`` mark say so). Torch's own profiler (Kineto) is
not a neighbour found here: it lives in torch's libraries, subscribes only while a profiler
runs, and the hub hands CUPTI to it (detector.py).

Checked once per process (the environment a tool is injected by is read by the driver at its
initialisation, and the libraries it loads stay mapped): a region's entry never pays for it.
Nothing here raises, loads a library or changes the environment.
"""
from __future__ import annotations

import os
from typing import Iterable, Mapping

#: mapped libraries that only a CUPTI tool loads -> the tool
LIBRARIES = (("libToolsInjection", "Nsight Systems (nsys)"),
             ("libsanitizer-", "compute-sanitizer"),
             ("libTreeLauncherTargetInjection", "compute-sanitizer"),
             ("libInterceptorInjectionTarget", "Nsight Compute (ncu)"),
             ("libcuda-gdb", "cuda-gdb"))
#: environment variable prefixes set by a tool's launcher -> the tool
PREFIXES = (("NSYS_", "Nsight Systems (nsys)"), ("COMPUTE_SANITIZER_", "compute-sanitizer"),
            ("NV_COMPUTE_PROFILER_", "Nsight Compute (ncu)"))
INJECTION = "CUDA_INJECTION64_PATH"
MULTIPLE = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"

_UNASKED = object()
_found: object = _UNASKED  # present()'s answer in this process, once asked


def _forget() -> None:
    global _found
    _found = _UNASKED


os.register_at_fork(after_in_child=_forget)  # a forked child has its own environment and maps


def _tool_of(name: str) -> str | None:
    for stem, tool in LIBRARIES:
        if stem.lower() in name.lower():
            return tool
    return None


def mapped_tools(maps: str = "/proc/self/maps") -> list[str]:
    """The CUPTI tools whose libraries are mapped into this process (none where maps cannot be
    read: another system, or a sandbox)."""
    tools: list[str] = []
    try:
        with open(maps, errors="replace") as f:
            for line in f:
                path = line.rstrip("\n").split(None, 5)[-1] if line.count(" ") >= 5 else ""
                tool = _tool_of(os.path.basename(path)) if path else None
                if tool and tool not in tools:
                    tools.append(tool)
    except OSError:
        return []
    return tools


def environment_tools(environ: Mapping[str, str]) -> list[str]:
    """The CUPTI tools that ``environ`` says launched this process."""
    tools: list[str] = []
    for key in environ:
        for prefix, tool in PREFIXES:
            if key.startswith(prefix) and tool not in tools:
                tools.append(tool)
    return tools


def describe(environ: Mapping[str, str], mapped: Iterable[str]) -> str | None:
    """The reason another CUPTI tool is in the process, or None: the injected library and the
    tools named by the environment and the mapped libraries."""
    tools = list(dict.fromkeys([*mapped, *environment_tools(environ)]))
    injected = environ.get(INJECTION, "").strip()
    if injected:
        tool = _tool_of(os.path.basename(injected))
        if tool and tool not in tools:
            tools.insert(0, tool)
        named = f" ({', '.join(tools)})" if tools else ""
        return (f"another CUPTI tool is injected into this process{named}: {INJECTION}="
                f"{injected}; CUPTI is left to it")
    if tools:
        return f"another CUPTI tool runs this process ({', '.join(tools)}); CUPTI is left to it"
    return None


def present(environ: Mapping[str, str] | None = None, maps: str = "/proc/self/maps"
            ) -> str | None:
    """Why another CUPTI tool holds (or will hold) CUPTI in this process, or None. Answered
    once per process for the real environment; given ``environ``, asked afresh (tests)."""
    global _found
    if environ is not None:
        return describe(environ, mapped_tools(maps))
    if _found is _UNASKED:
        try:
            _found = describe(os.environ, mapped_tools(maps))
        except Exception:  # never a crash for a check: no neighbour seen, the subscribe decides
            _found = None
    return _found  # type: ignore[return-value]


def refused(error: str, holder: str | None = None, environ: Mapping[str, str] | None = None,
            maps: str = "/proc/self/maps") -> str:
    """The reason a region gives when ``cuptiSubscribe`` failed with ``error`` (CUPTI's name
    for it): for a subscriber slot already taken, who holds it, where that is known
    (``holder``: the name ``cuptiSubscribe_v2`` reports; else a neighbour found by
    :func:`present`; else the likely one)."""
    if error != MULTIPLE:
        return f"cuptiSubscribe failed: {error}"
    who = (f"CUPTI is held by {holder!r}" if holder else present(environ, maps)
           or "another CUPTI client holds the one subscriber slot (torch.profiler earlier in "
              "this process, or a tool not recognised)")
    return f"cuptiSubscribe failed: {error}: {who}"
