"""A minimal ctypes binding of CUPTI's callback and activity APIs (no new dependency).

Why ctypes and not ``cupti-python``: the detector needs five callback functions and the memcpy
activity record, all stable C ABI since CUDA 10. ``cupti-python`` 13.x requires
``cuda-bindings~=13.0``, which the registries reachable here do not carry, and a cu12 torch needs
the 12.x wheel; ctypes over the libcupti that torch already loaded (or ships next to itself)
serves cu12 and cu13 builds alike, with nothing to install.

Loading never initialises CUDA. The library found is the one torch mapped into the process
(``/proc/self/maps``) when there is one, else a ``libcupti.so.<major>`` matching
``torch.version.cuda`` from the usual places.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys

# -- enums (cupti_callbacks.h, cupti_activity.h) -----------------------------------------------
DOMAIN_DRIVER, DOMAIN_RUNTIME = 1, 2
API_ENTER, API_EXIT = 0, 1
ACTIVITY_KIND_MEMCPY = 1
ACTIVITY_FLAG_FLUSH_FORCED = 1
SUCCESS = 0
MEMORY_KIND = {0: "unknown", 1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed",
               6: "device_static", 7: "managed_static"}
COPY_KIND = {1: "h2d", 2: "d2h", 8: "d2d", 9: "h2h", 10: "p2p"}
#: cudaMemcpyKind (driver_types.h)
CUDA_MEMCPY_KIND = {0: "h2h", 1: "h2d", 2: "d2h", 3: "d2d", 4: "default"}

#: Runtime callback ids from cupti_runtime_cbid.h; stable since CUDA 7 (new ids are only appended).
#: The detector resolves every name with ``cuptiGetCallbackName`` and uses these numbers only to
#: cross-check; the probe (tools/probe_gpu.py) records both.
RUNTIME_CBIDS = {
    "cudaFree_v3020": 22, "cudaMemcpy_v3020": 31, "cudaMemcpy2D_v3020": 32,
    "cudaMemcpyAsync_v3020": 41, "cudaMemcpy2DAsync_v3020": 44, "cudaThreadSynchronize_v3020": 126,
    "cudaStreamSynchronize_v3020": 131, "cudaEventSynchronize_v3020": 137,
    "cudaDeviceSynchronize_v3020": 165, "cudaMemcpyPeer_v4000": 160,
    "cudaMemcpy_ptds_v7000": 215, "cudaMemcpy2D_ptds_v7000": 216,
    "cudaMemcpyAsync_ptsz_v7000": 225, "cudaMemcpy2DAsync_ptsz_v7000": 228,
    "cudaStreamSynchronize_ptsz_v7000": 239,
}


class CallbackData(ctypes.Structure):
    """``CUpti_CallbackData`` (cupti_callbacks.h)."""

    _fields_ = [("callbackSite", ctypes.c_int), ("functionName", ctypes.c_char_p),
                ("functionParams", ctypes.c_void_p), ("functionReturnValue", ctypes.c_void_p),
                ("symbolName", ctypes.c_char_p), ("context", ctypes.c_void_p),
                ("contextUid", ctypes.c_uint32), ("correlationData", ctypes.c_void_p),
                ("correlationId", ctypes.c_uint32)]


class MemcpyAsyncParams(ctypes.Structure):
    """``cudaMemcpyAsync_v3020_params`` and ``cudaMemcpy_v3020_params`` (stream unused there)."""

    _fields_ = [("dst", ctypes.c_void_p), ("src", ctypes.c_void_p), ("count", ctypes.c_size_t),
                ("kind", ctypes.c_int), ("stream", ctypes.c_void_p)]


class Memcpy2DParams(ctypes.Structure):
    """``cudaMemcpy2D(Async)_v3020_params``."""

    _fields_ = [("dst", ctypes.c_void_p), ("dpitch", ctypes.c_size_t), ("src", ctypes.c_void_p),
                ("spitch", ctypes.c_size_t), ("width", ctypes.c_size_t),
                ("height", ctypes.c_size_t), ("kind", ctypes.c_int), ("stream", ctypes.c_void_p)]


class DriverCopyParams(ctypes.Structure):
    """``cuMemcpyHtoD_v2_params`` / ``cuMemcpyDtoH_v2_params``: destination, source, bytes (the
    device side is a ``CUdeviceptr``, the host side a pointer; both 64-bit)."""

    _fields_ = [("dst", ctypes.c_void_p), ("src", ctypes.c_void_p), ("count", ctypes.c_size_t)]


class DriverCopyAsyncParams(ctypes.Structure):
    """``cuMemcpyHtoDAsync_v2_params`` / ``cuMemcpyDtoHAsync_v2_params``: the same, then the stream."""

    _fields_ = [("dst", ctypes.c_void_p), ("src", ctypes.c_void_p), ("count", ctypes.c_size_t),
                ("stream", ctypes.c_void_p)]


class StreamParams(ctypes.Structure):
    """``cudaStreamSynchronize_v3020_params``: the stream is the only field."""

    _fields_ = [("stream", ctypes.c_void_p)]


class ActivityMemcpyHead(ctypes.Structure):
    """The leading fields of every ``CUpti_ActivityMemcpy*`` version (unchanged since CUDA 6)."""

    _fields_ = [("kind", ctypes.c_uint32), ("copyKind", ctypes.c_uint8),
                ("srcKind", ctypes.c_uint8), ("dstKind", ctypes.c_uint8),
                ("flags", ctypes.c_uint8), ("bytes", ctypes.c_uint64),
                ("start", ctypes.c_uint64), ("end", ctypes.c_uint64),
                ("deviceId", ctypes.c_uint32), ("contextId", ctypes.c_uint32),
                ("streamId", ctypes.c_uint32), ("correlationId", ctypes.c_uint32),
                ("runtimeCorrelationId", ctypes.c_uint32)]


CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
BUFFER_REQUESTED = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
BUFFER_COMPLETED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_size_t)


class CuptiError(RuntimeError):
    """A CUPTI call failed; the message carries CUPTI's own name for the error."""


def mapped_library(stem: str, maps: str = "/proc/self/maps") -> str | None:
    """The path of a shared library named ``stem*`` already mapped into this process, if any:
    loading that very file makes ctypes share the process's instance of it."""
    try:
        with open(maps) as f:
            for line in f:
                path = line.rstrip("\n").split(None, 5)[-1] if line.count(" ") >= 5 else ""
                if stem in os.path.basename(path):
                    return path
    except OSError:
        return None
    return None


def mapped_libcupti(maps: str = "/proc/self/maps") -> str | None:
    """The libcupti already mapped into this process (torch's Kineto loads one), if any."""
    return mapped_library("libcupti.so", maps)


def candidate_paths(major: str | None) -> list[str]:
    """Where a libcupti matching CUDA ``major`` may live, most specific first."""
    names = [f"libcupti.so.{major}"] if major else []
    names.append("libcupti.so")
    dirs = []
    for p in sys.path:
        dirs += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")))
        dirs += sorted(glob.glob(os.path.join(p, "nvidia", "cu*", "lib")))
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root:
            dirs += [os.path.join(root, "extras", "CUPTI", "lib64"),
                     os.path.join(root, "targets", "x86_64-linux", "lib"), os.path.join(root, "lib64")]
    dirs += ["/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
             "/usr/local/cuda/lib64"]
    out = []
    for d in dict.fromkeys(dirs):
        for n in names:
            hits = sorted(glob.glob(os.path.join(d, n + "*")))
            out += [h for h in hits if h not in out]
    return out


#: the first CUPTI whose cuptiSubscribe_v2 takes allowMultipleSubscribers (13.2: 13 * 10000 +
#: 2 * 100, as cuptiGetVersion reports it); 13.0.1 exports the entry point but answers
#: CUPTI_ERROR_INVALID_PARAMETER
SHARED_SUBSCRIBE_VERSION = 130200


class SubscriberParams(ctypes.Structure):
    """CUpti_SubscriberParams (cupti_callbacks.h, CUPTI >= 13.2): cuptiSubscribe_v2's 4th argument."""

    _fields_ = [("structSize", ctypes.c_size_t), ("subscriberName", ctypes.c_char_p),
                ("oldSubscriberName", ctypes.c_char_p), ("oldSubscriberSize", ctypes.c_size_t),
                ("allowMultipleSubscribers", ctypes.c_uint8), ("padding", ctypes.c_uint8 * 7)]


class Cupti:
    """The loaded library with typed entry points; one per process (see :func:`load`)."""

    def __init__(self, lib, path: str):
        self.lib, self.path = lib, path
        lib.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), CALLBACK, ctypes.c_void_p]
        lib.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
        lib.cuptiEnableCallback.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int,
                                            ctypes.c_uint32]
        lib.cuptiGetResultString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.cuptiGetCallbackName.argtypes = [ctypes.c_int, ctypes.c_uint32,
                                             ctypes.POINTER(ctypes.c_char_p)]
        lib.cuptiActivityRegisterCallbacks.argtypes = [BUFFER_REQUESTED, BUFFER_COMPLETED]
        lib.cuptiActivityEnable.argtypes = [ctypes.c_int]
        lib.cuptiActivityDisable.argtypes = [ctypes.c_int]
        lib.cuptiActivityFlushAll.argtypes = [ctypes.c_uint32]
        lib.cuptiActivityGetNextRecord.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                                   ctypes.POINTER(ctypes.c_void_p)]

    def version(self) -> int | None:
        """cuptiGetVersion's answer (13.2 is 130200), or None where it gives none."""
        fn = getattr(self.lib, "cuptiGetVersion", None)
        v = ctypes.c_uint32()
        if fn is None or fn(ctypes.byref(v)) != SUCCESS:
            return None
        return v.value

    def shared_subscribe(self):
        """cuptiSubscribe_v2 where this CUPTI takes allowMultipleSubscribers (version checked
        first), else None."""
        version = self.version()
        if version is None or version < SHARED_SUBSCRIBE_VERSION:
            return None
        return getattr(self.lib, "cuptiSubscribe_v2", None)

    def error_name(self, code: int) -> str:
        s = ctypes.c_char_p()
        if self.lib.cuptiGetResultString(code, ctypes.byref(s)) == SUCCESS and s.value:
            return s.value.decode()
        return f"CUPTI error {code}"

    def check(self, code: int, what: str) -> None:
        if code != SUCCESS:
            raise CuptiError(f"{what} failed: {self.error_name(code)}")

    def callback_name(self, domain: int, cbid: int) -> str | None:
        s = ctypes.c_char_p()
        if self.lib.cuptiGetCallbackName(domain, cbid, ctypes.byref(s)) != SUCCESS or not s.value:
            return None
        return s.value.decode()

    def callback_ids(self, domain: int, names, limit: int = 2000) -> dict[str, int]:
        """Resolve API names to callback ids with CUPTI's own table (no callback is enabled)."""
        want, found, misses = set(names), {}, 0
        for cbid in range(1, limit):
            name = self.callback_name(domain, cbid)
            if name is None:
                misses += 1
                if misses > 64:  # past the end of the table
                    break
                continue
            misses = 0
            if name in want:
                found[name] = cbid
        return found


_loaded: Cupti | None = None
_load_error: str | None = None


def load() -> Cupti:
    """Load libcupti once; raises CuptiError with a one-line reason when it cannot be used."""
    global _loaded, _load_error
    if _loaded is not None:
        return _loaded
    if _load_error is not None:
        raise CuptiError(_load_error)
    torch = sys.modules.get("torch")
    cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    if not cuda:
        _load_error = "torch is not a CUDA build" if torch else "torch is not imported"
        raise CuptiError(_load_error)
    major = str(cuda).split(".")[0]
    tried = []
    mapped = mapped_libcupti()
    paths = ([mapped] if mapped else []) + candidate_paths(major)
    for path in paths:
        if path in tried:
            continue
        tried.append(path)
        base = os.path.basename(path)
        if path != mapped and not (base.startswith(f"libcupti.so.{major}") or base == "libcupti.so"):
            continue
        try:
            lib = ctypes.CDLL(path)
            _loaded = Cupti(lib, path)
            return _loaded
        except (OSError, AttributeError) as e:
            tried[-1] = f"{path} ({e})"
    _load_error = (f"no libcupti for CUDA {major} found (tried {len(tried)} path(s): "
                   f"{', '.join(tried[:4]) or 'none'})")
    raise CuptiError(_load_error)


def api_census(lib: Cupti, fn) -> dict[str, int]:
    """Which CUDA runtime and driver APIs ``fn()`` calls, and how often: CUPTI callbacks on both
    whole domains with a counting callback, subscribed only for the call. Independent of the
    cuda detector's table and callbacks; used as ground truth for calls the profiler does not
    list (driver APIs) and by the overhead benchmark. Needs the one CUPTI subscriber slot: where
    the cuda detector holds it (from its first region on), call this inside ``HUB.lent()``."""
    counts: dict[int, int] = {}

    def count(userdata, domain, cbid, cbdata):
        # an int key and no allocation of GC-tracked objects: no collection (which could free a
        # tensor and call CUDA) can start inside the callback
        key = domain * 100000 + cbid
        counts[key] = counts.get(key, 0) + 1

    cb = CALLBACK(count)
    lib.lib.cuptiEnableDomain.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int]
    handle = ctypes.c_void_p()
    lib.check(lib.lib.cuptiSubscribe(ctypes.byref(handle), cb, None), "cuptiSubscribe")
    try:
        for domain in (DOMAIN_DRIVER, DOMAIN_RUNTIME):
            lib.check(lib.lib.cuptiEnableDomain(1, handle, domain), "cuptiEnableDomain")
        fn()
    finally:
        lib.lib.cuptiUnsubscribe(handle)
    return named_counts(lib, counts)


def named_counts(lib: Cupti, counts: dict[int, int]) -> dict[str, int]:
    """Callback counts keyed ``domain * 100000 + cbid`` (ENTER and EXIT each counted) as calls
    per API: ``{"drv cuMemcpyHtoDAsync_v2": 100, "rt cudaMemcpyAsync_v3020": 100, ...}``."""
    out = {}
    for key, n in sorted(counts.items()):
        domain, cbid = divmod(key, 100000)
        name = lib.callback_name(domain, cbid) or f"cbid {cbid}"
        out[("drv " if domain == DOMAIN_DRIVER else "rt ") + name] = n // 2  # ENTER + EXIT
    return out
