"""Does torch.profiler still work after syncguard's cuda detector held CUPTI in this process?

The corpus runner's ground-truth pass (one profiler session per snippet, after the default
detectors' regions) failed on torch 2.11.0 at c0bd2c4 and e8a2950 with ``inserted.second
INTERNAL ASSERT FAILED at collection.cpp:1152`` (Kineto's duplicate flow-start check) for every
snippet that copies, and worked at fec4c3f. Between them: callbacks disabled before
cuptiUnsubscribe, and parking. Each variant runs in its own process:

  none          no CUPTI before the profiler
  audit1        one syncguard.audit() with a copy, no other thread (disable, then unsubscribe)
  audit50       fifty of them
  parked50      fifty with a helper thread alive (the hub parks); the thread stops; profile
  parked50_live the same, the helper thread still alive while profiling
  raw_on50      raw CUPTI: subscribe, enable the detector's callbacks, unsubscribe (fec4c3f)
  raw_off50     raw CUPTI: subscribe, enable, disable every callback, unsubscribe (e8a2950)
  raw_nocb50    raw CUPTI: subscribe, unsubscribe
  raw_drv_off50 raw_off50 with only the driver-domain callbacks
  raw_rt_off50  raw_off50 with only the runtime-domain callbacks

Each then profiles a D2H copy, an H2D copy, a D2D copy and a stream sync twice, and prints one
JSON line: whether ``prof.events()`` raised, and the memcpy and sync events it saw.

Run: ``python tools/probe_profiler_after.py`` (all variants, one process each), or with a variant.
"""
import ctypes
import json
import subprocess
import sys
import threading
import time

VARIANTS = ["none", "audit1", "audit50", "parked50", "parked50_live", "raw_on50", "raw_off50",
            "raw_nocb50", "raw_drv_off50", "raw_rt_off50"]


def work(torch, x, h):
    x.cpu()
    h.copy_(x.cpu()).to("cuda")
    x.clone().copy_(x)
    torch.cuda.current_stream().synchronize()


def one(variant: str) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import syncguard
    from syncguard.detectors.cuda import cupti as C
    from syncguard.detectors.cuda.calls import callback_table

    x = torch.randn(1024, device="cuda")
    h = torch.empty(1024)
    work(torch, x, h)
    torch.cuda.synchronize()
    stop = threading.Event()

    def noise():
        while not stop.is_set():
            float(x.sum())
            time.sleep(0.0005)

    th = None
    if variant.startswith("parked"):
        th = threading.Thread(target=noise, daemon=True)
        th.start()
    n = 50 if variant.endswith("50") or variant.endswith("50_live") else 1
    notes = []
    if variant.startswith("audit") or variant.startswith("parked"):
        for _ in range(n):
            with syncguard.audit() as rep:
                work(torch, x, h)
            notes += rep.notes
    elif variant.startswith("raw"):
        lib = C.load()
        table = list(callback_table(lib))
        if "drv" in variant:
            table = [t for t in table if t[0] == C.DOMAIN_DRIVER]
        if "_rt_" in variant:
            table = [t for t in table if t[0] == C.DOMAIN_RUNTIME]
        cb = C.CALLBACK(lambda *a: None)
        handle = ctypes.c_void_p()
        for _ in range(n):
            assert lib.lib.cuptiSubscribe(ctypes.byref(handle), cb, None) == 0
            if "nocb" not in variant:
                for d, c in table:
                    lib.lib.cuptiEnableCallback(1, handle, d, c)
            work(torch, x, h)
            if "_off" in variant:
                for d, c in table:
                    lib.lib.cuptiEnableCallback(0, handle, d, c)
            lib.lib.cuptiUnsubscribe(handle)
    if th is not None and not variant.endswith("_live"):
        stop.set()
        th.join()
    out = {"variant": variant, "torch": torch.__version__, "notes": sorted(set(notes))[:2],
           "sessions": []}
    for _ in range(2):
        s = {}
        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                work(torch, x, h)
            names = [e.name for e in prof.events()]
            s["ok"] = True
            s["memcpy"] = sum(1 for m in names if "Memcpy" in m and not m.startswith("cuda"))
            s["runtime"] = sorted({m for m in names if m.startswith("cuda") or m.startswith("cu")})
        except Exception as e:  # noqa: BLE001 - the answer we are after
            s["ok"] = False
            s["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        out["sessions"].append(s)
    stop.set()
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(one(sys.argv[1])), flush=True)
        sys.exit(0)
    for v in VARIANTS:
        p = subprocess.run([sys.executable, __file__, v], capture_output=True, text=True,
                           timeout=300)
        line = p.stdout.strip().splitlines()[-1:] or [json.dumps(
            {"variant": v, "rc": p.returncode, "stderr": p.stderr[-400:]})]
        print(line[0], flush=True)
