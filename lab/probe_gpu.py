"""One-off probe of what the profiler, sync-debug mode and _gpu_trace see on a real GPU.

Its output (reports/probe-*.json) fixed the design of syncguard.detectors.hooks; kept so it can be rerun.
"""
import json, os, sys, threading, time, warnings, subprocess
import torch
from torch.profiler import profile, ProfilerActivity, record_function

OUT = os.environ.get("OUT", ".")
dev = "cuda"
res = {"torch": torch.__version__, "native_tid": threading.get_native_id(), "ident": threading.get_ident()}

# warm up
a = torch.randn(1024, 1024, device=dev); (a @ a).sum().item(); torch.cuda.synchronize()

def snippets():
    x = torch.randn(4096, device=dev)
    m_cuda = x > 0
    m_cpu = m_cuda.cpu()
    pinned = torch.randn(4096).pin_memory()
    pageable = torch.randn(4096)
    emb = torch.randn(4096, 64, device=dev)
    src_rows = torch.randn(int(m_cpu.sum()), 64, device=dev)
    s = torch.cuda.Stream()
    ev = torch.cuda.Event()
    def empty_cache():
        t = torch.empty(64 << 20, device=dev); del t; torch.cuda.empty_cache()
    return {
        "item": lambda: x.sum().item(),
        "tolist": lambda: x[:4].tolist(),
        "bool": lambda: bool(x.sum() > 0),
        "nonzero": lambda: x.nonzero(),
        "masked_select": lambda: x.masked_select(m_cuda),
        "unique": lambda: x.unique(),
        "repeat_interleave": lambda: torch.repeat_interleave(torch.ones(8, dtype=torch.long, device=dev)),
        "repeat_interleave_os": lambda: torch.repeat_interleave(torch.ones(8, dtype=torch.long, device=dev), output_size=8),
        "cuda_mask_index": lambda: x[m_cuda],
        "cuda_mask_assign": lambda: emb.__setitem__(m_cuda, src_rows),
        "cpu_mask_assign": lambda: emb.__setitem__(m_cpu, src_rows),
        "cpu_mask_index": lambda: x[m_cpu],
        "masked_scatter": lambda: emb.masked_scatter_(m_cuda.unsqueeze(-1), src_rows),
        "cpu": lambda: x.cpu(),
        "to_cuda_pageable": lambda: pageable.to(dev),
        "to_cuda_pageable_nb": lambda: pageable.to(dev, non_blocking=True),
        "to_cuda_pinned_nb": lambda: pinned.to(dev, non_blocking=True),
        "to_cpu_pinned_nb": lambda: x.to("cpu", non_blocking=True),
        "to_cpu_pinned_copy_nb": lambda: pinned.copy_(x, non_blocking=True),
        "to_cpu_pageable_copy_nb": lambda: pageable.copy_(x, non_blocking=True),
        "tensor_list": lambda: torch.tensor([1, 2, 3], device=dev),
        "cuda_synchronize": lambda: torch.cuda.synchronize(),
        "stream_synchronize": lambda: s.synchronize(),
        "event_synchronize": lambda: (ev.record(), ev.synchronize()),
        "empty_cache": empty_cache,
        "matmul": lambda: emb @ emb.T,
        "cumsum": lambda: x.cumsum(0),
        "sort": lambda: x.sort(),
        "topk": lambda: x.topk(8),
        "d2d": lambda: x.clone(),
    }

def ev_dict(e):
    p = e.cpu_parent
    return {"name": e.name, "type": str(getattr(e, "device_type", "")), "thread": e.thread,
            "start": e.time_range.start, "end": e.time_range.end,
            "parent": p.name if p is not None else None,
            "grandparent": (p.cpu_parent.name if p is not None and p.cpu_parent is not None else None),
            "stack": [str(f) for f in e.stack[:6]] if getattr(e, "stack", None) else None,
            "parent_stack": [str(f) for f in p.stack[:6]] if p is not None and getattr(p, "stack", None) else None}

INTEREST = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaFree",
            "cudaMemcpy", "cudaMemcpyAsync", "Memcpy", "cudaStreamWaitEvent", "cuMem", "syncguard", "cudaMalloc",
            "cudaHostAlloc", "cudaEventQuery", "cudaStreamQuery")

def interesting(name):
    return any(k in name for k in INTEREST)

def run_profiled(fn, with_stack, acts):
    torch.cuda.synchronize()
    with profile(activities=acts, with_stack=with_stack) as prof:
        with record_function("syncguard::region"):
            fn()
        with record_function("syncguard::stop"):
            pass
    evs = [ev_dict(e) for e in prof.events() if interesting(e.name)]
    return evs

# sync debug capture
def debug_count(fn):
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return [str(x.message)[:200] for x in w]

sn = snippets()
# prime each once (lazy things)
for k, f in sn.items():
    f()
torch.cuda.synchronize()
out = {}
for k, f in sn.items():
    out[k] = {
        "trace_cpu_cuda": run_profiled(f, False, [ProfilerActivity.CPU, ProfilerActivity.CUDA]),
        "debug": debug_count(f),
    }
out["cuda_synchronize"]["trace_stack"] = run_profiled(sn["cuda_synchronize"], True, [ProfilerActivity.CPU, ProfilerActivity.CUDA])
out["item"]["trace_stack"] = run_profiled(sn["item"], True, [ProfilerActivity.CPU, ProfilerActivity.CUDA])
out["empty_cache"]["trace_stack"] = run_profiled(sn["empty_cache"], True, [ProfilerActivity.CPU, ProfilerActivity.CUDA])
out["item"]["trace_cuda_only"] = run_profiled(sn["item"], False, [ProfilerActivity.CUDA])
res["snippets"] = out

# gpu_trace callbacks
import torch.cuda._gpu_trace as gt
fired = []
try:
    gt.register_callback_for_device_synchronization(lambda: fired.append(("device", threading.get_native_id())))
    gt.register_callback_for_stream_synchronization(lambda s: fired.append(("stream", s)))
    gt.register_callback_for_event_synchronization(lambda e: fired.append(("event", e)))
    torch._C._activate_gpu_trace()
    gt_res = {}
    for k, f in sn.items():
        fired.clear(); f(); torch.cuda.current_stream().synchronize() if False else None
        gt_res[k] = [x[0] for x in fired]
    res["gpu_trace"] = gt_res
except Exception as e:
    res["gpu_trace"] = repr(e)

# background thread: profiler thread ids
def bg():
    x = torch.randn(10, device=dev); x.sum().item()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    t = threading.Thread(target=bg, name="bgworker"); t.start(); bg_tid = None; t.join()
    torch.randn(3, device=dev).sum().item()
res["bg_thread_events"] = [ev_dict(e) for e in prof.events() if interesting(e.name)]
res["mem_stats_keys"] = [k for k in torch.cuda.memory_stats() if "num_" in k]
try:
    import cupti  # noqa
    res["cupti"] = "importable"
except Exception as e:
    res["cupti"] = repr(e)

# overhead candidates on 2000 tiny kernels
def loop():
    y = torch.zeros(16, device=dev)
    for _ in range(2000):
        y.add_(1)
def tm(fn, reps=5):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    ts.sort(); return ts[len(ts)//2]
def prof_wrap(acts, stack=False):
    def f():
        with profile(activities=acts, with_stack=stack):
            loop()
    return f
def dbg():
    torch.cuda.set_sync_debug_mode("warn"); loop(); torch.cuda.set_sync_debug_mode(0)
ov = {}
ov["bare"] = tm(loop)
ov["debug"] = tm(dbg)
ov["prof_cpu_cuda"] = tm(prof_wrap([ProfilerActivity.CPU, ProfilerActivity.CUDA]))
ov["prof_cuda"] = tm(prof_wrap([ProfilerActivity.CUDA]))
ov["prof_cpu"] = tm(prof_wrap([ProfilerActivity.CPU]))
ov["prof_cpu_cuda_stack"] = tm(prof_wrap([ProfilerActivity.CPU, ProfilerActivity.CUDA], True))
ov["bare2"] = tm(loop)
res["overhead_s"] = ov
json.dump(res, open(os.path.join(OUT, f"probe-{torch.__version__.split('+')[0]}.json"), "w"), indent=1, default=str)

# fresh process: context creation and first matmul
code = r'''
import torch, json
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
    a = torch.randn(256, 256, device="cuda")
    b = a @ a
    torch.cuda.synchronize()
print(json.dumps([(e.name, e.cpu_parent.name if e.cpu_parent else None) for e in p.events() if e.name.startswith("cu")]))
'''
r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
json.dump({"stdout": r.stdout[-20000:], "stderr": r.stderr[-4000:]}, open(os.path.join(OUT, "probe-fresh.json"), "w"), indent=1)
print("overhead", {k: round(v / ov["bare"], 2) for k, v in ov.items()})
print("gpu_trace", res["gpu_trace"])
for k, v in out.items():
    print(k, [(e["name"], e["parent"]) for e in v["trace_cpu_cuda"] if not e["name"].startswith("syncguard")], len(v["debug"]))
