"""Does a thread that keeps syncing crash the process while another thread opens and closes
audited regions? Run as ``python tools/stress_threads.py MODE N`` (MODE: bare or audit); the
shell loop in tools/gpu_suite.sh counts exit codes over several processes of each mode, side by
side, so a crash is attributed to syncguard only if bare never crashes.

Why: unsubscribing CUPTI beside a thread inside a CUDA call crashed the process (the CUPTI-only
probe's runs: reports/probes/cupti-threads-2.11.0/; docs/cuda-detector.md tells the story), so
the detector keeps its one subscription and routes regions by thread instead
(src/syncguard/detectors/cuda/hub.py). This rechecks that on every torch of the GPU suite.
"""
import contextlib
import faulthandler
import sys
import threading
import time

import torch

import syncguard

faulthandler.enable()
mode, n = sys.argv[1], int(sys.argv[2])
t = torch.ones(16, device="cuda")
x = torch.randn(4096, device="cuda")
idx = torch.randint(0, 4096, (4096,), device="cuda")
stop, syncs = threading.Event(), [0]


def noise():
    while not stop.is_set():
        float(t.sum())  # a D2H read and a stream sync on this thread, no region of its own
        syncs[0] += 1
        time.sleep(0.0002)


th = threading.Thread(target=noise, daemon=True)
th.start()
t0 = time.time()
ran = ()
for _ in range(n):
    with (syncguard.audit() if mode == "audit" else contextlib.nullcontext()) as report:
        torch.zeros(4096, device="cuda").scatter_add_(0, idx, x)
        x.cumsum(0)
        x.sort()
    ran = report.detectors if report is not None else ()
stop.set()
th.join()
# the detectors the default chose with the helper thread alive (cuda, since the fix)
print(f"{mode}: {n} regions, detectors {','.join(ran) or '-'}, helper thread synced {syncs[0]} "
      f"times, {time.time() - t0:.1f} s")
