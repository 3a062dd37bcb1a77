"""merge_with_cuda (syncguard/detectors/torch_hooks.py) against the plain scan it replaced, side
by side in one run, on one region's hand-built events (no GPU): n syncs from the fake detector,
none of them also seen by cuda (the case the scan was quadratic in).

    python bench/bench_merge_hooks.py > reports/cpu/merge-hooks.txt
"""
import dataclasses
import sys
import time

from syncguard.detectors.torch_hooks import _klass, merge_with_cuda
from syncguard.records.events import SyncEvent


def scan(found, items):
    """The scan merge_with_cuda was before it indexed the cuda events (tests/test_detect.py keeps
    the same rule as its reference)."""
    out, taken = list(found), set()
    for ev, allows, marker in items:
        for i, (other, a2, m2) in enumerate(out):
            if (i not in taken and "cuda" in other.detectors and other.filename == ev.filename
                    and other.lineno == ev.lineno and _klass(other.kind) == _klass(ev.kind)):
                taken.add(i)
                out[i] = (dataclasses.replace(other, detectors=tuple(dict.fromkeys(
                    other.detectors + ev.detectors))), a2, m2)
                break
        else:
            out.append((ev, allows, marker))
    return out


def main() -> int:
    print(f"python {sys.version.split()[0]}; seconds per merge of n fake syncs into none (best of 3)")
    print("n\tscan_s\tindexed_s\tratio")
    for n in (1000, 8000, 32000):
        items = [(SyncEvent(api="cudaStreamSynchronize", kind="stream_sync", filename="m.py",
                            lineno=i % 50, detectors=("fake",)), (), None) for i in range(n)]
        best = {}
        for name, fn in (("scan", scan), ("indexed", merge_with_cuda)):
            t = []
            for _ in range(3 if n <= 8000 else 1):
                t0 = time.perf_counter()
                out = fn([], items)
                t.append(time.perf_counter() - t0)
            assert len(out) == n
            best[name] = min(t)
        print(f"{n}\t{best['scan']:.4f}\t{best['indexed']:.4f}\t{best['scan'] / best['indexed']:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
