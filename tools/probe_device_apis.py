"""What torch's device APIs answer on a real one-GPU machine: the ground truth that
tests/test_predict_shim.py's expected values are checked against (the prediction shim must answer
as a one-GPU machine does).

    python tools/probe_device_apis.py > OUT.txt      (on the GPU machine; tools/gpu_suite.sh runs it)

One line per call: ``OK name -> repr(result)`` or ``ERR name -> module class 'message'``. The
first line names torch and the device count, so a file says which build it describes.
"""
import sys
import warnings

import torch

warnings.simplefilter("ignore")
A, c = torch.accelerator, torch.cuda

#: (name, expression) evaluated with ``torch``, ``A`` (torch.accelerator), ``c`` (torch.cuda) and
#: ``x`` (a CUDA tensor on device 0) in scope
CALLS = [
    ("accelerator", "(A.is_available(), A.current_accelerator(), A.current_accelerator(True), "
                    "A.device_count(), A.current_device_index())"),
    ("new_tensor/type", "(x.new_tensor([1.]).device, x.type(), x.type(torch.float64).type(), "
                        "x.type('torch.cuda.DoubleTensor').device)"),
    ("ones cuda:1", "torch.ones(2, device='cuda:1')"), ("to cuda:1", "torch.ones(2).to('cuda:1')"),
    (".cuda(1)", "torch.ones(2).cuda(1)"), ("d2d to cuda:1", "x.to('cuda:1')"),
    ("empty cuda:5", "torch.empty(2, device=torch.device('cuda', 5))"),
    ("tensor cuda:1", "torch.tensor([1.], device='cuda:1')"), ("set_device(1)", "c.set_device(1)"),
    ("device(1)", "c.device(1).__enter__()"), ("get_device_properties(1)", "c.get_device_properties(1)"),
    ("get_device_name(1)", "c.get_device_name(1)"), ("get_device_capability(1)", "c.get_device_capability(1)"),
    ("Stream(device=1)", "c.Stream(device=1)"), ("synchronize(1)", "c.synchronize(1)"),
    ("current_stream(1)", "c.current_stream(1)"), ("memory_allocated(1)", "c.memory_allocated(1)"),
    ("mem_get_info(1)", "c.mem_get_info(1)"), ("Linear.to cuda:1", "torch.nn.Linear(2, 2).to('cuda:1')"),
    ("accelerator.set_device_index(1)", "A.set_device_index(1)"),
    ("Generator cuda:1", "torch.Generator(device='cuda:1')"), ("randn cuda:1", "torch.randn(2, device='cuda:1')"),
    ("ones cuda:-1", "torch.ones(2, device='cuda:-1')"), ("zeros_like cuda:1", "torch.zeros_like(x, device='cuda:1')"),
    ("torch.device('cuda', 2)", "torch.device('cuda', 2)"), ("empty_cache", "c.empty_cache()"),
    ("seed", "(c.seed(), c.initial_seed() >= 0)"),
    ("nvtx", "(c.nvtx.range_push('a'), c.nvtx.range_pop(), c.nvtx.mark('m'), c.nvtx.range_start('r'))"),
    ("CUDAGraph", "type(c.CUDAGraph())"), ("is_current_stream_capturing", "c.is_current_stream_capturing()"),
    ("memory_summary", "c.memory_summary()[:80]"), ("accelerator.current_stream", "A.current_stream()"),
    ("device_of(x)", "c.device_of(x).__enter__()"), ("device(0)", "c.device(0).__enter__()"),
    ("accelerator.device_index(1)", "A.device_index(1).__enter__()"),
    ("accelerator.get_device_capability()", "A.get_device_capability()"),
    ("accelerator.get_device_capability(1)", "A.get_device_capability(1)"),
    ("save/load of a CUDA tensor", "(lambda b: (torch.save(x, b), b.seek(0), "
                                   "torch.load(b).device)[2])(__import__('io').BytesIO())"),
    ("storage.cuda() in map_location", "(lambda b: (torch.save({'x': x, 'h': x.cpu()}, b), b.seek(0), "
                                       "{k: v.device for k, v in torch.load(b, map_location=lambda s, l: "
                                       "s.cuda()).items()})[2])(__import__('io').BytesIO())"),
    ("storage.cuda(1) in map_location", "(lambda b: (torch.save(x, b), b.seek(0), torch.load("
                                        "b, map_location=lambda s, l: s.cuda(1)))[2])(__import__('io').BytesIO())"),
    ("storage.cuda().cuda(0) is itself", "(lambda s: s.cuda(0) is s)(torch.ones(2).untyped_storage().cuda())"),
]


def main() -> int:
    print(torch.__version__, "device_count", c.device_count())
    if not c.is_available():
        print("no CUDA here: nothing to probe", file=sys.stderr)
        return 2
    x = torch.ones(2, device="cuda")
    scope = {"torch": torch, "A": A, "c": c, "x": x}
    for name, expr in CALLS:
        try:
            r = eval(expr, scope)  # noqa: S307 (expressions of this file only)
            print("OK", name, "->", repr(r)[:150])
        except BaseException as e:  # noqa: BLE001 (what it raises is the answer)
            print("ERR", name, "->", type(e).__module__, type(e).__name__, repr(str(e).splitlines()[0] if str(e) else "")[:300])
    return 0


if __name__ == "__main__":
    sys.exit(main())
