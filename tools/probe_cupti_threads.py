"""Which CUPTI subscription pattern survives a thread that keeps syncing while another thread opens
and closes regions? ``tools/stress_threads.py`` showed the cuda detector crash the process (SIGSEGV
on the syncing thread, 3 of 3 processes) where bare never did. This probe isolates the CUPTI calls:

  churn        subscribe + enable per region, unsubscribe after (what the detector did)
  churn_gil    the same, with every CUPTI management call made holding the GIL (ctypes.PyDLL)
  churn_off    the same, but all callbacks disabled (cuptiEnableCallback 0) before unsubscribing
  churn_nocb   subscribe and unsubscribe per region, no callback ever enabled
  toggle       subscribe once; per region enable the callbacks, disable them after
  once         subscribe and enable once, for the whole process
  audit        syncguard.audit(detectors="cuda") per region (the detector as it stands)
  bare         no CUPTI at all

Run: ``python tools/probe_cupti_threads.py VARIANT N``; exit code 0 means it survived.
"""
import contextlib
import ctypes
import faulthandler
import sys
import threading
import time

import torch

import syncguard
from syncguard.detectors.cuda import cupti as C
from syncguard.detectors.cuda.detector import callback_table

faulthandler.enable()
variant, n = sys.argv[1], int(sys.argv[2])
t = torch.ones(16, device="cuda")
x = torch.randn(4096, device="cuda")
idx = torch.randint(0, 4096, (4096,), device="cuda")
torch.cuda.synchronize()
stop, syncs, calls = threading.Event(), [0], [0]

lib = C.load()
table = list(callback_table(lib))
raw = ctypes.PyDLL(lib.path) if variant == "churn_gil" else lib.lib
raw.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), C.CALLBACK, ctypes.c_void_p]
raw.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
raw.cuptiEnableCallback.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]


def callback(userdata, domain, cbid, cbdata):
    data = C.CallbackData.from_address(cbdata)
    if data.callbackSite == C.API_ENTER:
        sys._getframe(0)
        calls[0] += 1


CB = C.CALLBACK(callback)
handle = ctypes.c_void_p()


def subscribe():
    rc = raw.cuptiSubscribe(ctypes.byref(handle), CB, None)
    assert rc == 0, rc


def enable(on, h=None):
    for domain, cbid in table:
        raw.cuptiEnableCallback(on, handle, domain, cbid)


def noise():
    while not stop.is_set():
        float(t.sum())
        syncs[0] += 1
        time.sleep(0.0002)


@contextlib.contextmanager
def region():
    if variant in ("churn", "churn_gil", "churn_off", "churn_nocb"):
        subscribe()
        if variant != "churn_nocb":
            enable(1)
        try:
            yield
        finally:
            if variant == "churn_off":
                enable(0)
            raw.cuptiUnsubscribe(handle)
    elif variant == "toggle":
        enable(1)
        try:
            yield
        finally:
            enable(0)
    elif variant == "audit":
        with syncguard.audit(detectors="cuda"):
            yield
    else:
        yield


if variant in ("toggle", "once"):
    subscribe()
    if variant == "once":
        enable(1)
th = threading.Thread(target=noise, daemon=True)
th.start()
t0 = time.time()
for _ in range(n):
    with region():
        torch.zeros(4096, device="cuda").scatter_add_(0, idx, x)
        x.cumsum(0)
        float(x.sum())
stop.set()
th.join()
print(f"{variant}: {n} regions, helper synced {syncs[0]} times, {calls[0]} callbacks, "
      f"{time.time() - t0:.1f} s")
