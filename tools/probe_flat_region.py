"""Probe (CPU, not a test): what a cold ``audit(("cuda",))`` region's entry and exit cost against
the same essential work done in one frame each way.

    python tools/probe_flat_region.py [--rounds 201] [--out FILE]

Without CUDA: over ``bench_callback``'s stand-in hub (a C stand-in for libcupti, the C callback, a
fake libcudart saying pinned), with caches thrashed before entering and before leaving (a 32 MB
tensor rewritten, 20,000 strings made, as ``bench_callback._region_cold`` does). With CUDA: over
the real hub and libcupti, with 100 merges and a device sync before entering and before leaving
(the overhead benchmark's loop; its callbacks fire, with no region open for the stand-ins, so
only ``audit(cuda)``'s exit judges what it saw: one folded copy and the sync). Each round enters
and leaves, in turn:

* ``audit(cuda)``: the library's region, empty;
* ``one frame each way``: a stand-in region doing only what a cuda region must (a report, the
  tracing check, the hub's lock, CUPTI on through the C module, the profiler-start wrappers, the
  backward-engine proxy, the hub's count and list, the context variable; and back), each way in
  one Python frame, with the library's own helpers for the wrappers and the proxy (its context
  variable a private one of the same kind, so that no callback delivers to it);
* ``CUPTI and the context variable``: the C module's on/off and the region context variable only;
* ``audit(cuda) again``: the library's region again, as an A/A control.

Medians of entry and exit (the first 5 rounds left out), printed and, with ``--out``, written as
markdown. Why: on the H200, a cold region's entry and exit are about two thirds syncguard's
(reports/probes/cupti-cold-04a3c72/); this bounds what flattening the region's layers (the
region, the detector seam, the hub) could save, before anyone restructures them.
"""
import argparse
import contextlib
import contextvars
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree

import torch  # noqa: E402

import bench.bench_callback as bench  # noqa: E402
from bench import commit_label, emit  # noqa: E402
import syncguard  # noqa: E402
from syncguard.attribution.frames import is_tracing  # noqa: E402
from syncguard.detectors.cuda import detector as cuda_mod  # noqa: E402
from syncguard.records.events import Report  # noqa: E402
from syncguard.reporting.provenance import git_state  # noqa: E402


#: stands in for ``routing.regions`` (same kind and use), so no callback sees these stand-ins
_REGIONS: contextvars.ContextVar = contextvars.ContextVar("probe_flat_region", default=())


class Flat:
    """The essential work of a cuda region's entry and exit, one frame each way (not a region:
    no allows, no fallback, no parking, no events)."""

    __slots__ = ("report", "hub", "handle", "saved", "token")

    def __init__(self, hub):
        self.report, self.hub = Report(detectors=()), hub

    def __enter__(self):
        if is_tracing():
            return self.report
        hub = self.hub
        with hub.lock:
            c = hub._c_entry()
            hub.fast.folding(True)
            code, self.handle, _ = hub.fast.on(c[0], c[1], 0)
            self.saved = cuda_mod.wrap_profiler_start(hub.hand_over, hub._profiler_wrappers)
            hub.backward.install()
            hub.users += 1
            hub.regions.append(self)
        self.report.detectors = ("cuda",)
        self.token = _REGIONS.set(_REGIONS.get() + (self,))
        return self.report

    def __exit__(self, *exc):
        _REGIONS.reset(self.token)
        hub = self.hub
        with hub.lock:
            hub.regions.remove(self)
            hub.users -= 1
            cuda_mod.unwrap(self.saved)
            hub.backward.restore()
            c = hub._c_entry()
            hub.fast.off(c[1], c[2], self.handle)
        return False


class Floor:
    """CUPTI on and off through the C module, and the region context variable: nothing else."""

    __slots__ = ("hub", "handle", "token")

    def __init__(self, hub):
        self.hub = hub

    def __enter__(self):
        c = self.hub._c_entry()
        code, self.handle, _ = self.hub.fast.on(c[0], c[1], 0)
        self.token = _REGIONS.set(_REGIONS.get() + (self,))

    def __exit__(self, *exc):
        _REGIONS.reset(self.token)
        c = self.hub._c_entry()
        self.hub.fast.off(c[1], c[2], self.handle)
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=201)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if torch.cuda.is_available():
        from bench.workloads import mask_merges, merge_state
        from syncguard.detectors.cuda.detector import HUB

        why = HUB.unavailable()
        if why:
            raise SystemExit(f"cuda detector unavailable: {why}")
        st = merge_state()

        def thrash():
            mask_merges(st, 100)
            torch.cuda.synchronize()
        setting, hubs = "the real hub, 100 merges before entering and leaving", contextlib.nullcontext(HUB)
    else:
        big = torch.zeros(8_000_000)

        def thrash():
            big.add_(1)
            return [str(i) for i in range(20000)]
        setting, hubs = "CPU, the stand-in hub", _stand_in()
    with hubs as hub:
        if hub.fast is None:
            raise SystemExit("the C module is not built: python setup.py build_ext --inplace")
        variants = {"audit(cuda)": lambda: syncguard.audit(("cuda",)),
                    "one frame each way": lambda: Flat(hub),
                    "CUPTI and the context variable": lambda: Floor(hub),
                    "audit(cuda) again (A/A)": lambda: syncguard.audit(("cuda",))}
        got = {k: ([], []) for k in variants}
        for i in range(a.rounds):
            for name, make in variants.items():
                thrash()
                t0 = time.perf_counter()
                region = make()
                region.__enter__()
                t1 = time.perf_counter()
                thrash()
                t2 = time.perf_counter()
                region.__exit__(None, None, None)
                t3 = time.perf_counter()
                if i >= 5:
                    got[name][0].append((t1 - t0) * 1e6)
                    got[name][1].append((t3 - t2) * 1e6)
        assert not hub.subscribed and hub.users == 0 and not hub.regions
    git = git_state(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) or {}
    commit = commit_label(git)
    where = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    lines = [f"# A cold region's entry and exit against its essential work · {where} · python "
             f"{sys.version.split()[0]} · torch {torch.__version__} · commit {commit}", "",
             f"`tools/probe_flat_region.py --rounds {a.rounds}` ({setting}); medians over "
             f"{a.rounds - 5} rounds, each variant in turn within a round, µs:", "",
             "| variant | entry | exit |", "|---|---|---|"]
    lines += [f"| {k} | {statistics.median(e):.1f} | {statistics.median(x):.1f} |"
              for k, (e, x) in got.items()]
    emit(lines, a.out)


@contextlib.contextmanager
def _stand_in():
    with bench._stand_in_hub() as hub, bench._fake_cudart(1):
        yield hub


if __name__ == "__main__":
    main()
