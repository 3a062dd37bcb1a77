"""Probe CUPTI from ctypes on the GPU machine; evidence for the cuda detector's design.

    python tools/probe_cupti.py OUT_DIR

Records (as JSON under OUT_DIR): which libcupti was loaded and from where; the callback ids that
``cuptiGetCallbackName`` gives for the detector's API names, against the numbers in
cupti_runtime_cbid.h; the ``functionName`` each enabled callback reports when it fires (the
cross-check); the copy parameters and the MEMCPY activity records (pageable/pinned) matched by
correlation id; and the profiler's thread ids against ``threading.get_native_id()``.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    res: dict = {}

    def save():
        with open(os.path.join(out_dir, "probe-cupti.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)

    import torch

    from syncguard.detectors.cuda import cupti as C
    from syncguard.detectors.cuda.detector import DRIVER_APIS, HUB, RUNTIME_APIS, canonical

    res["torch"], res["cuda"] = torch.__version__, torch.version.cuda
    res["mapped_before_init"] = C.mapped_libcupti()
    torch.cuda.init()
    x = torch.ones(8, device="cuda")
    (x @ x).item()
    res["mapped_after_init"] = C.mapped_libcupti()
    res["candidates"] = C.candidate_paths(torch.version.cuda.split(".")[0])
    res["unavailable"] = HUB.unavailable()
    lib = HUB.lib
    res["loaded"] = lib.path if lib else None
    save()
    # 1. callback ids by name vs the header
    table = {f"{d}:{cb}": v[0] for (d, cb), v in HUB.table.items()}
    res["table"] = table
    header = {}
    for full, cbid in C.RUNTIME_CBIDS.items():
        header[full] = {"header": cbid, "cupti_name": lib.callback_name(C.DOMAIN_RUNTIME, cbid)}
    res["header_check"] = header
    res["unresolved_runtime"] = [a for a in RUNTIME_APIS if a not in table.values()]
    res["unresolved_driver"] = [a for a in DRIVER_APIS if a not in table.values()]
    save()
    # 2. raw callbacks: functionName as fired, for each enabled cbid
    fired = []

    @C.CALLBACK
    def raw(userdata, domain, cbid, data_ptr):
        d = C.CallbackData.from_address(data_ptr)
        if d.callbackSite == C.API_ENTER:
            fired.append((domain, cbid, d.functionName.decode() if d.functionName else None,
                          d.correlationId, threading.get_native_id()))

    h = ctypes.c_void_p()
    code = lib.lib.cuptiSubscribe(ctypes.byref(h), raw, None)
    res["raw_subscribe"] = lib.error_name(code) if code else "ok"
    if code == 0:
        for (d, cb) in HUB.table:
            lib.lib.cuptiEnableCallback(1, h, d, cb)
        ops = {}
        for name, fn in {"item": lambda: x.sum().item(), "sync": torch.cuda.synchronize,
                         "h2d": lambda: torch.ones(1 << 16).to("cuda"),
                         "cpu_idx": lambda: x[torch.tensor([1, 2])]}.items():
            n = len(fired)
            fn()
            ops[name] = fired[n:]
        lib.lib.cuptiUnsubscribe(h)
        res["raw_fired"] = ops
        res["name_mismatch"] = [(d, cb, fn, table.get(f"{d}:{cb}")) for v in ops.values()
                                for (d, cb, fn, _c, _t) in v
                                if canonical(fn or "") != table.get(f"{d}:{cb}")]
    save()
    # 3. a region's raw observations and activity records
    import syncguard

    h = torch.ones(1 << 16)
    p = torch.ones(1 << 16).pin_memory()
    reg = syncguard.audit()
    with reg:
        x.sum().item()
        h.to("cuda", non_blocking=True)
        p.to("cuda", non_blocking=True)
        x[torch.tensor([1, 2])]
    res["region_detectors"] = reg.report.detectors
    fields = ("direction", "is_async", "stream", "nbytes", "src", "dst", "correlation")
    res["region_observations"] = [dict(api=o.api, kind=o.kind, line=o.site.lineno,
                                       detail={k: getattr(o, k, None) for k in fields},
                                       blocked=o.blocked_us)
                                  for o in reg.observations]
    res["region_records"] = {str(k): v for k, v in reg.state.get("cuda_records", {}).items()}
    res["region_events"] = [e.to_dict() for e in reg.report.syncs]
    res["region_notes"] = reg.report.notes
    res["hub_errors"] = HUB.errors
    res["subscribed_after"] = HUB.subscribed
    save()
    # (overhead: bench/bench_overhead.py, interleaved, before any profiler runs)
    # 5. profiler thread ids (last: after the profiler runs CUPTI cannot be subscribed again)
    from torch.profiler import ProfilerActivity, profile

    seen = {}

    def bg():
        seen["bg_native"] = threading.get_native_id()
        for _ in range(3):
            x.sum().item()

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        x.sum().item()
        t = threading.Thread(target=bg)
        t.start()
        t.join()
    res["main_native"] = threading.get_native_id()
    res.update(seen)
    rows = []
    for e in prof.events():
        if e.name in ("cudaStreamSynchronize", "cudaMemcpyAsync", "aten::item", "aten::sum",
                      "aten::_local_scalar_dense"):
            p = e.cpu_parent
            rows.append((e.name, getattr(e, "thread", None), getattr(e, "fwd_thread", None),
                         p.name if p is not None else None,
                         getattr(p, "thread", None) if p is not None else None))
    res["profiler_threads"] = rows
    save()


if __name__ == "__main__":
    main(sys.argv[1])
