"""The detector seam: one small protocol, one registry.

A detector is one module with one class implementing :class:`~syncguard.detectors.seam.Detector`,
registered here by name.
A region arms the detectors it was asked for (in registry order), routes their observations
through :mod:`syncguard.detectors.routing`, disarms them in reverse, and asks each to turn what it saw into
events (``finish``), each detector receiving the events of those before it so that two views of
one sync (sync-debug mode's warning and a wrapper's copy kind) become one event. Adding a detector
touches its module plus one line in :func:`_builtin`.

``auto`` (the default) means the most complete detector available: ``cuda`` (CUPTI callbacks) when
it can subscribe, else the reversible torch-hook detectors ``debug`` and ``trace``. The region's
report names what ran and why.
"""
from __future__ import annotations

import threading

from syncguard.detectors.seam import Detector

AUTO = "auto"
#: what ``auto`` falls back to when the cuda detector cannot run: reversible, no lasting hook
FALLBACK = ("debug", "trace")


_registry: dict[str, Detector] = {}
_ordered: dict[tuple, tuple] = {}  # selected names -> their detectors in order (every region asks)
#: a region's requested detectors -> ((the cuda detector,), the names that ran, the reason), for
#: the requests that resolved to the cuda detector alone; a region of such a request enters and
#: leaves through the detector's fused ``arm_alone``/``disarm_alone`` while the hub is in its
#: steady state (``cuda/_cuptifast_c/regions.c``), else through the seam as usual
CUDA_ALONE: dict[tuple, tuple] = {}


def register(detector: Detector) -> Detector:
    if detector.name in _registry or detector.name == AUTO:
        raise ValueError(f"detector {detector.name!r} is already registered")
    _registry[detector.name] = detector
    _ordered.clear()
    CUDA_ALONE.clear()
    return detector


def _builtin() -> None:
    if _builtin_done:
        return
    with _builtin_lock:  # regions first entered by several threads at once each came here
        _register_builtin()


def _register_builtin() -> None:
    global _builtin_done
    if _builtin_done:
        return
    from syncguard.detectors.torch_hooks import Debug, Fake, GpuTrace, Profile, Trace
    from syncguard.detectors.cuda.detector import Cuda
    from syncguard.detectors.predicted import Predict

    for det in (Fake(), Cuda(), Debug(), Trace(), GpuTrace(), Profile(), Predict()):
        register(det)
    _builtin_done = True  # last: another thread reads the registry only once it is whole


_builtin_lock = threading.Lock()
_builtin_done = False


def names() -> tuple[str, ...]:
    _builtin()
    return tuple(_registry)


def get(name: str) -> Detector:
    _builtin()
    return _registry[name]


def ordered(selected) -> tuple[Detector, ...]:
    key = tuple(selected)
    hit = _ordered.get(key)
    if hit is None:
        _builtin()
        hit = _ordered[key] = tuple(sorted((_registry[n] for n in key), key=lambda d: d.order))
    return hit


def resolve(requested: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """Replace ``auto`` by the most complete detector available; the reason says what was chosen."""
    if AUTO not in requested:
        return requested, None
    rest = _rest.get(requested)
    if rest is None:
        rest = tuple(n for n in requested if n != AUTO)
        if len(_rest) < 64:
            _rest[requested] = rest
    # the profiler and the cuda detector cannot both hold CUPTI (one subscriber per process)
    cuda = get("cuda")
    why = "the profile detector holds CUPTI" if "profile" in rest else cuda.unavailable()
    if why is None:
        # every region asks: the answer is made once per (request, callback) and reused
        callback = cuda.callback
        hit = _chosen.get((requested, callback))
        if hit is None:
            hit = (tuple(dict.fromkeys(("cuda",) + rest)),
                   f"cuda: CUPTI callbacks on the CUDA runtime and driver ({callback})")
            if len(_chosen) < 64:
                _chosen[(requested, callback)] = hit
        return hit
    return tuple(dict.fromkeys(FALLBACK + rest)), f"{','.join(FALLBACK)}: cuda detector unavailable ({why})"


_rest: dict[tuple, tuple] = {}  # a request -> its names without auto
_chosen: dict[tuple, tuple] = {}  # (request, the cuda detector's callback) -> resolve's answer
