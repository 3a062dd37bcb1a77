"""A 20-second check of the cuda detector before a lease's long runs (not a test): one region
around each of a pageable copy, a pinned copy, .item() and 100 sync-free merges, with the callback
the hub chose; prints what each reported and exits 1 if any differs from what it should."""
import sys

import torch

import syncguard

x = torch.arange(64.0, device="cuda")
h, p = torch.ones(1 << 16), torch.ones(1 << 16).pin_memory()
emb = torch.randn(4096, 64, device="cuda")
mask = torch.rand(4096) < 0.5
rows = torch.randn(int(mask.sum()), 64, device="cuda")
cases = {
    "pageable_copy": (lambda: h.to("cuda", non_blocking=True), ["pageable_copy"]),
    "pinned_copy": (lambda: p.to("cuda", non_blocking=True), []),
    "item": (lambda: x.sum().item(), ["blocking_copy_d2h"]),
    "merges": (lambda: [emb.__setitem__(mask, rows) for _ in range(100)], []),
}
bad = 0
for name, (fn, want) in cases.items():
    fn()
    torch.cuda.synchronize()
    with syncguard.audit() as rep:
        fn()
    got = sorted(e.kind for e in rep.syncs)
    ok = got == want and rep.detectors == ("cuda",)
    bad += not ok
    print(f"{'ok ' if ok else 'BAD'} {name}: {got} detectors={rep.detectors} "
          f"reason={rep.detector_reason!r} notes={rep.notes}")
sys.exit(1 if bad else 0)
