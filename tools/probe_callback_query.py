"""Probe (H200, not a test): may a CUPTI callback ask the runtime whether a copy's host memory is
pinned, and what does the question cost there?

    python tools/probe_callback_query.py [--rounds 20]

The detector never calls CUDA from its callback: an early probe that called
``cudaPointerGetAttributes`` through the CUDA toolkit's own libcudart (a second runtime beside
torch's) inside the callback hung the process (NOTES). So a sync-free merge's pinned copy is kept
in full (the GIL, the user's site, a ``Call``) and its memory asked at the region's exit; on the
H200 that is about 2% of 100 merges on torch 2.14.1 (``reports/archive/51b50c2/gpu-2.14.1/overhead-2.14.1.json``,
merges without entry and exit less CUPTI's own). Knowing "pinned" in the callback would let such a
copy be recorded without the site. This probe asks the question where that change would: a
small C callback (built here with ``cc``), subscribed alone, calls the ``cudaPointerGetAttributes``
of the runtime torch itself loaded (``hostmem.pointer_functions``) on the source of every
host-to-device ``cudaMemcpyAsync`` at its API_ENTER, and counts the answers. A watchdog ends the
process (exit 3) if a step makes no progress for 60 s. It prints, for each step:

1. 100 sync-free merges (``emb[cpu_mask] = rows``), ``--rounds`` times: questions, failures,
   answers pinned / other, ns per question as the callback timed it, and the loop's ms with the
   callback against without it;
2. pageable copies (``torch.randn(n).to("cuda")``), which must answer "not pinned";
3. a CUDA graph captured around a pinned ``non_blocking`` copy, while the callback asks: does the
   capture still succeed and replay.
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree

import torch  # noqa: E402

from bench.workloads import mask_merges, merge_state  # noqa: E402
from syncguard.detectors.cuda import cupti as C  # noqa: E402
from syncguard.detectors.cuda.calls import callback_table  # noqa: E402
from syncguard.detectors.cuda.hostmem import pointer_functions  # noqa: E402

SOURCE = r"""
#include <stdint.h>
#include <stddef.h>
#include <time.h>
typedef struct { int callbackSite; const char *functionName; const void *functionParams;
                 void *functionReturnValue; const char *symbolName; void *context;
                 uint32_t contextUid; uint64_t *correlationData; uint32_t correlationId; } CallbackData;
typedef struct { void *dst; const void *src; size_t count; int kind; void *stream; } MemcpyParams;
typedef int (*GetFn)(void *, const void *);
typedef int (*ClearFn)(void);
static GetFn get; static ClearFn clear_error; static uint32_t want;
static long counts[5]; /* questions, failures, pinned, other, ns */
static __thread int inside;
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                             return t.tv_sec * 1000000000LL + t.tv_nsec; }
void configure(void *g, void *c, uint32_t cbid) {
    get = (GetFn)g; clear_error = (ClearFn)c; want = cbid;
    for (int i = 0; i < 5; i++) counts[i] = 0;
}
void callback(void *userdata, int domain, uint32_t cbid, const CallbackData *d) {
    if (domain != 2 || cbid != want || !d || d->callbackSite != 0 || inside) return;
    const MemcpyParams *m = (const MemcpyParams *)d->functionParams;
    if (!m || m->kind != 1) return; /* host to device only */
    inside = 1;
    int attributes[32] = {0};
    long long t0 = now();
    int rc = get(attributes, m->src);
    long long t1 = now();
    if (rc) { counts[1]++; clear_error(); } else if (attributes[0] == 1) counts[2]++; else counts[3]++;
    counts[0]++; counts[4] += t1 - t0;
    inside = 0;
}
void read_counts(long *out) { for (int i = 0; i < 5; i++) out[i] = counts[i]; }
"""


def build() -> ctypes.CDLL:
    d = tempfile.mkdtemp()
    src, lib = os.path.join(d, "q.c"), os.path.join(d, "q.so")
    with open(src, "w") as fh:
        fh.write(SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, src], check=True)
    return ctypes.CDLL(lib)


class Watchdog(threading.Thread):
    """Ends the process (exit 3) if ``beat()`` is not called for ``limit`` seconds."""

    def __init__(self, limit=60.0):
        super().__init__(daemon=True)
        self.limit, self.last, self.step = limit, time.monotonic(), "start"

    def beat(self, step=None):
        self.last = time.monotonic()
        self.step = step or self.step

    def run(self):
        while True:
            time.sleep(1)
            if time.monotonic() - self.last > self.limit:
                print(f"HANG: no progress for {self.limit:.0f} s in step {self.step!r}", flush=True)
                os._exit(3)


def counts(lib) -> list:
    out = (ctypes.c_long * 5)()
    lib.read_counts(out)
    return list(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    dog = Watchdog()
    dog.start()
    cupti = C.load()
    cbid = next(c for (d, c), spec in callback_table(cupti).items()
                if d == C.DOMAIN_RUNTIME and spec[0] == "cudaMemcpyAsync")
    st = merge_state()
    mask_merges(st, 10)  # warm: the host allocator's pinned block exists, kernels are loaded
    torch.cuda.synchronize()
    fns = pointer_functions()
    if fns is None:
        print("pointer_functions(): nothing may be asked (capturing, or no runtime)")
        return 2
    q = build()

    def reset():  # the function to ask with, the id to watch, every count back to 0
        q.configure(ctypes.c_void_p(fns[0]), ctypes.c_void_p(fns[1]), ctypes.c_uint32(cbid))

    reset()
    cb = ctypes.cast(q.callback, C.CALLBACK)
    handle = ctypes.c_void_p()
    cupti.check(cupti.lib.cuptiSubscribe(ctypes.byref(handle), cb, None), "subscribe")
    print(f"torch {torch.__version__}, libcupti {cupti.path}, cudaMemcpyAsync cbid {cbid}", flush=True)

    def loop_ms(on: bool) -> float:
        cupti.lib.cuptiEnableCallback(1 if on else 0, handle, C.DOMAIN_RUNTIME, cbid)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        mask_merges(st, 100)
        torch.cuda.synchronize()
        dog.beat()
        return (time.perf_counter() - t0) * 1e3

    try:
        dog.beat("1: merges")
        with_q, without = [], []
        for _ in range(a.rounds):
            without.append(loop_ms(False))
            with_q.append(loop_ms(True))
        n, fail, pinned, other, ns = counts(q)
        print(f"1 merges: {n} questions, {fail} failed, {pinned} pinned, {other} other; "
              f"{ns / max(n, 1):.0f} ns per question (callback-timed); 100 merges "
              f"{statistics.median(with_q):.3f} ms asking vs {statistics.median(without):.3f} ms "
              f"not (median of {a.rounds})", flush=True)

        dog.beat("2: pageable")
        reset()
        cupti.lib.cuptiEnableCallback(1, handle, C.DOMAIN_RUNTIME, cbid)
        for _ in range(20):
            torch.randn(4096).to("cuda")
        torch.cuda.synchronize()
        n, fail, pinned, other, ns = counts(q)
        print(f"2 pageable copies: {n} questions, {fail} failed, {pinned} pinned, {other} other",
              flush=True)

        dog.beat("3: capture")
        reset()
        src = torch.randn(4096).pin_memory()
        dst = torch.empty(4096, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dst.copy_(src, non_blocking=True)  # warm on the side stream
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                dst.copy_(src, non_blocking=True)
            g.replay()
            torch.cuda.synchronize()
            ok = bool(torch.equal(dst.cpu(), src))
            result = f"captured and replayed, copy {'right' if ok else 'WRONG'}"
        except Exception as e:  # the finding, not a failure of the probe
            result = f"capture failed: {type(e).__name__}: {str(e).splitlines()[0]}"
        n, fail, pinned, other, ns = counts(q)
        print(f"3 graph capture: {result}; {n} questions, {fail} failed, {pinned} pinned, "
              f"{other} other", flush=True)
    finally:
        cupti.lib.cuptiEnableCallback(0, handle, C.DOMAIN_RUNTIME, cbid)
        cupti.lib.cuptiUnsubscribe(handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
