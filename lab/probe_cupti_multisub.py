"""Probe (GPU, not a test): can a CUPTI 13.4 multi-subscriber subscription live beside the
profiler of a torch built on CUDA 13.0?

    python lab/probe_cupti_multisub.py --lib PATH/libcupti.so.13 --out DIR   # DIR/multisub.{jsonl,md}

The library comes from the ``nvidia-cuda-cupti`` 13.4 wheel, downloaded on the CPU machine into a
git-ignored folder of the checkout (``pip download --no-deps --only-binary=:all: --python-version
3.12 --platform manylinux_2_25_x86_64 -d .whl-cupti nvidia-cuda-cupti==13.4.92``), carried, and
on the device extracted alone: ``python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob(
'.whl-cupti/*.whl')[0]).extract('nvidia/cu13/lib/libcupti.so.13', '/tmp/c134')"``. Run it from
the repository root with the package importable (installed, or ``PYTHONPATH=src``).

Why: issue 44 asks the ``cuda`` detector to run beside ``torch.profiler``. CUPTI >= 13.2 has
``cuptiSubscribe_v2`` with ``allowMultipleSubscribers``; torch 2.11 and 2.14.1 ship CUDA 13.0
(libcupti 13.0.1), and ``nvidia-cuda-cupti`` 13.4 is on the package index. This probe carries
that wheel's libcupti and asks, each case in a fresh process:

* ``bare``: the profiler twice, nothing else subscribed (the ground truth of what it records);
* ``image-v2``: the libcupti torch uses (the image's), a v2 subscribe with sharing asked for;
* ``second-*``: the 13.4 library loaded beside torch's (``ctypes.CDLL``, RTLD_GLOBAL, after
  ``import torch``): two copies mapped;
* ``preload-*``: the 13.4 library preloaded (``LD_PRELOAD``), so that torch's Kineto binds to
  it too (one copy, the soname ``libcupti.so.13`` is taken);

and for the last two, in three orders: ``sub-first`` (a syncguard-like v2 subscriber with
sharing, its runtime-domain callbacks on, then a profiler session, then unsubscribed and a
profiler again), ``profiler-first`` (a profiler session, then the v2 subscribe, then a profiler
with it on), ``inside`` (the v2 subscribe while a profiler session runs). Each case records the
CUPTI result codes, how many runtime callbacks the subscriber saw while the profiler ran, and
what the profiler's trace holds (kernels, the runtime's sync and copy calls) against ``bare``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

CASES = ("bare", "image-v2", "second-sub-first", "second-profiler-first", "second-inside",
         "preload-sub-first", "preload-profiler-first", "preload-inside")
RUNTIME_DOMAIN = 2
API_ENTER = 0
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cudaMemcpyAsync", "cudaLaunchKernel")


class SubscriberParams(ctypes.Structure):
    """``CUpti_SubscriberParams`` (cupti_callbacks.h of CUPTI 13.4)."""

    _fields_ = [("structSize", ctypes.c_size_t), ("subscriberName", ctypes.c_char_p),
                ("oldSubscriberName", ctypes.c_char_p), ("oldSubscriberSize", ctypes.c_size_t),
                ("allowMultipleSubscribers", ctypes.c_uint8), ("padding", ctypes.c_uint8 * 7)]


def mapped_cuptis() -> list[str]:
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split(None, 5)[-1].strip() if line.count(" ") >= 5 else ""
            if "libcupti.so" in os.path.basename(path) and path not in out:
                out.append(path)
    return out


class Subscriber:
    """A syncguard-like subscriber: v2 with sharing asked for, every runtime callback on,
    counting API_ENTER callbacks (the calling thread's; nothing else done in the callback)."""

    def __init__(self, lib):
        self.lib, self.count, self.handle = lib, 0, ctypes.c_void_p()
        self.on = False

        def cb(userdata, domain, cbid, cbdata):
            if ctypes.cast(cbdata, ctypes.POINTER(ctypes.c_int))[0] == API_ENTER:
                self.count += 1

        self._cb = CALLBACK(cb)

    def subscribe(self) -> dict:
        old = ctypes.create_string_buffer(64)
        p = SubscriberParams(structSize=ctypes.sizeof(SubscriberParams),
                             subscriberName=b"syncguard probe", oldSubscriberName=ctypes.cast(
                                 old, ctypes.c_char_p), oldSubscriberSize=64,
                             allowMultipleSubscribers=1)
        fn = getattr(self.lib, "cuptiSubscribe_v2", None)
        if fn is None:
            return {"code": None, "why": "no cuptiSubscribe_v2"}
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), CALLBACK, ctypes.c_void_p,
                       ctypes.POINTER(SubscriberParams)]
        code = fn(ctypes.byref(self.handle), self._cb, None, ctypes.byref(p))
        out = {"code": code, "name": error_name(self.lib, code), "old_subscriber": old.value.decode(
            errors="replace")}
        if code == 0:
            self.lib.cuptiEnableDomain.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int]
            out["enable_domain"] = self.lib.cuptiEnableDomain(1, self.handle, RUNTIME_DOMAIN)
            self.on = True
        return out

    def unsubscribe(self) -> int | None:
        if not self.on:
            return None
        self.lib.cuptiEnableDomain(0, self.handle, RUNTIME_DOMAIN)
        self.lib.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
        self.on = False
        return self.lib.cuptiUnsubscribe(self.handle)


def error_name(lib, code: int) -> str:
    s = ctypes.c_char_p()
    lib.cuptiGetResultString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    if lib.cuptiGetResultString(code, ctypes.byref(s)) == 0 and s.value:
        return s.value.decode()
    return f"CUPTI error {code}"


def version(lib) -> int:
    v = ctypes.c_uint32()
    lib.cuptiGetVersion(ctypes.byref(v))
    return v.value


def workload(torch, x) -> None:
    for _ in range(5):
        (x * 2).sum().item()
    torch.cuda.synchronize()


def profiled(torch, x, sub: Subscriber | None = None, inside=None) -> dict:
    """One profiler session around the workload: what its trace holds, and what ``sub`` saw."""
    from torch.autograd import DeviceType

    before = sub.count if sub else 0
    out: dict = {}
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as p:
            if inside is not None:
                out["inside"] = inside()
            workload(torch, x)
        events = p.events()
        gpu = [e for e in events if e.device_type == DeviceType.CUDA]
        out["kernels"] = sum(1 for e in gpu if not e.name.startswith(("Memcpy", "Memset")))
        out["gpu_memcpy"] = sum(1 for e in gpu if e.name.startswith("Memcpy"))
        out["runtime"] = {n: sum(1 for e in events if e.name == n) for n in SYNC_NAMES}
        out["error"] = None
    except Exception as e:  # the probe records what the profiler raised
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    if sub is not None:
        out["subscriber_callbacks"] = sub.count - before
    return out


def case(name: str, lib_path: str) -> dict:
    import torch

    x = torch.randn(4096, device="cuda")
    workload(torch, x)  # CUDA and the kernels set up before anything is counted
    rec: dict = {"case": name, "torch": torch.__version__, "mapped_before": mapped_cuptis()}
    if name == "bare":
        rec["profiler_1"], rec["profiler_2"] = profiled(torch, x), profiled(torch, x)
        return rec
    if name == "image-v2":
        sys.path.insert(0, os.getcwd())
        from syncguard.detectors.cuda import cupti as C

        lib = C.load().lib
        rec["lib"] = C.load().path
    elif name.startswith("second-"):
        lib = ctypes.CDLL(lib_path, mode=ctypes.RTLD_GLOBAL)
        rec["lib"] = lib_path
    else:  # preload-: torch's own binding is the preloaded library
        lib = ctypes.CDLL(mapped_cuptis()[0]) if mapped_cuptis() else ctypes.CDLL(lib_path)
        rec["lib"] = mapped_cuptis()[0] if mapped_cuptis() else lib_path
    rec["cupti_version"] = version(lib)
    sub = Subscriber(lib)
    if name == "image-v2":
        rec["subscribe"] = sub.subscribe()
        rec["unsubscribe"] = sub.unsubscribe()
        rec["profiler_after"] = profiled(torch, x)
    elif name.endswith("sub-first"):
        rec["subscribe"] = sub.subscribe()
        n = sub.count
        workload(torch, x)
        rec["callbacks_alone"] = sub.count - n
        rec["profiler_with_sub"] = profiled(torch, x, sub)
        rec["callbacks_after_profiler"] = (lambda n: (workload(torch, x), sub.count - n)[1])(sub.count)
        rec["unsubscribe"] = sub.unsubscribe()
        rec["profiler_after_unsub"] = profiled(torch, x)
    elif name.endswith("profiler-first"):
        rec["profiler_first"] = profiled(torch, x)
        rec["subscribe"] = sub.subscribe()
        rec["profiler_with_sub"] = profiled(torch, x, sub)
        rec["unsubscribe"] = sub.unsubscribe()
    else:  # inside
        rec["profiler_with_sub"] = profiled(torch, x, sub, inside=sub.subscribe)
        rec["unsubscribe"] = sub.unsubscribe()
        rec["profiler_after"] = profiled(torch, x)
    rec["mapped_after"] = mapped_cuptis()
    return rec


def render(rows: list[dict]) -> str:
    def trace(p):
        if not isinstance(p, dict):
            return "-"
        if p.get("error"):
            return f"error: {p['error']}"
        rt = p.get("runtime", {})
        s = (f"{p['kernels']} kernels, {rt.get('cudaStreamSynchronize', 0)} stream syncs, "
             f"{rt.get('cudaMemcpyAsync', 0)} memcpy, {rt.get('cudaDeviceSynchronize', 0)} device syncs")
        if "subscriber_callbacks" in p:
            s += f"; subscriber saw {p['subscriber_callbacks']}"
        return s

    lines = ["| case | rc | CUPTI version | libcupti mapped after | subscribe | profiler traces |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        res = r.get("result", {})
        sub = res.get("subscribe") or (res.get("profiler_with_sub") or {}).get("inside")
        subs = f"{sub['code']} {sub.get('name', '')}" if isinstance(sub, dict) else "-"
        traces = "; ".join(f"{k}: {trace(v)}" for k, v in res.items() if k.startswith("profiler"))
        mapped = ", ".join(os.path.basename(os.path.dirname(os.path.dirname(p))) + "/" +
                           os.path.basename(p) for p in res.get("mapped_after", res.get(
                               "mapped_before", [])))
        lines.append(f"| {r['case']} | {r['rc']} | {res.get('cupti_version', '-')} | {mapped} | "
                     f"{subs} | {traces or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="the carried libcupti.so.13 (13.4)")
    ap.add_argument("--out")
    ap.add_argument("--case", choices=CASES)
    a = ap.parse_args()
    if a.case:
        print("RESULT " + json.dumps(case(a.case, a.lib)), flush=True)
        return
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for name in CASES:
        env = dict(os.environ)
        if name.startswith("preload-"):
            env["LD_PRELOAD"] = os.path.abspath(a.lib)
        t0 = time.time()
        p = subprocess.run([sys.executable, __file__, "--lib", a.lib, "--case", name], env=env,
                           capture_output=True, text=True, timeout=240)
        got = [ln[7:] for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        row = {"case": name, "rc": p.returncode, "seconds": round(time.time() - t0, 1),
               "result": json.loads(got[-1]) if got else {},
               "stderr_tail": p.stderr.splitlines()[-12:]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(a.out, "multisub.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(os.path.join(a.out, "multisub.md"), "w") as f:
        f.write(render(rows))


if __name__ == "__main__":
    main()
