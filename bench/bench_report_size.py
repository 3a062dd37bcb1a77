"""Session report size and write time for a synthetic suite: per-site records vs per-event storage.

    python bench/bench_report_size.py [--tests 2000] [--syncs 10000] [--out reports/cpu/report-size.txt]

The suite (issue 15): ``--tests`` tests, each with one site in the project's package syncing
``--syncs`` times. Events are built as the detectors build them (``SyncEvent`` with an 8-frame
stack: the package's line, the test's line, then pytest's and pluggy's real files), fed through
the plugin's own code (``aggregate.aggregate`` under the default code scope of a src/ project),
and written by the plugin's own writer (``SessionFile.write``). No GPU, no pytest run: this
measures the report, not the detectors.

Printed, never asserted: the report's size and write time (median of 3 writes), the time to read
it back, the aggregation cost per event, and, side by side, what the same suite weighs stored one
record per event (schema 1): measured on one test's events, multiplied by the number of tests
(writing 20 million events whole is what the issue says not to do). Last, what the detectors'
attribution costs per sync with the 8-frame stacks of before and the 32 frames the code scope
needs (time and memory held per event, side by side).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import sysconfig
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from syncguard.attribution.aggregate import aggregate  # noqa: E402
from syncguard.attribution.codescope import default_scope  # noqa: E402
from syncguard.attribution.frames import user_site  # noqa: E402
from syncguard.records.events import SyncEvent  # noqa: E402
from syncguard.reporting.sessionfile import SessionFile, TestEntry, load_document  # noqa: E402

TARGET_BYTES, TARGET_WRITE_S = 2 * 1024 * 1024, 1.0


def _outer_frames() -> list[str]:
    """pytest's frames below every test function, with the installed files' real paths."""
    lib = sysconfig.get_paths()["purelib"]
    return [f"{lib}/_pytest/python.py:159 in pytest_pyfunc_call",
            f"{lib}/pluggy/_callers.py:103 in _multicall",
            f"{lib}/pluggy/_manager.py:120 in _hookexec",
            f"{lib}/pluggy/_hooks.py:513 in __call__",
            f"{lib}/_pytest/python.py:1627 in runtest",
            f"{lib}/_pytest/runner.py:174 in pytest_runtest_call"]


def events_of(project: Path, i: int, n: int) -> list[SyncEvent]:
    """One test's ``n`` syncs at one site; 16 variants of host time blocked, as a real loop."""
    site = f"{project}/src/pkg/mod_{i:04d}.py"
    stack = (f"{site}:42 in step_{i}", f"{project}/tests/test_mod_{i:04d}.py:17 in test_{i}",
             *_outer_frames())
    variants = [SyncEvent("cudaStreamSynchronize", "stream_sync", op="aten::_local_scalar_dense",
                          ops=("aten::item", "aten::_local_scalar_dense"), filename=site,
                          lineno=42, function=f"step_{i}", stack=stack, thread="MainThread",
                          host_blocked_us=8.0 + v, detectors=("debug", "trace"))
                for v in range(16)]
    return [variants[k % 16] for k in range(n)]


def suite(project: Path, tests: int, syncs: int) -> tuple[list[TestEntry], float]:
    """The entries the plugin would build, and the seconds spent aggregating."""
    scope = default_scope(project)
    entries, spent = [], 0.0
    for i in range(tests):
        events = events_of(project, i, syncs)
        t0 = time.perf_counter()
        inside, outside = aggregate(events, scope)
        spent += time.perf_counter() - t0
        entries.append(TestEntry(f"tests/test_mod_{i:04d}.py::test_{i}", "failed", "syncs",
                                 syncs=tuple(inside), outside=tuple(outside), duration_s=0.5))
    return entries, spent


def per_event_bytes(project: Path, syncs: int) -> int:
    """One test stored one record per event, as schema 1 did (same JSON layout as the writer)."""
    entry = {"nodeid": "tests/test_mod_0000.py::test_0", "outcome": "failed", "audit": "syncs",
             "syncs": [e.to_dict() for e in events_of(project, 0, syncs)]}
    return len(json.dumps(entry, indent=1)) + 2


def _nested(n: int, fn):
    return fn() if n == 0 else _nested(n - 1, fn)


def stack_cost(depth: int, calls: int = 20000) -> tuple[float, float]:
    """(µs per call, bytes held per event) of the detectors' attribution (detect.user_site)
    collecting ``depth`` frames, called 40 frames deep in this file."""
    def measure():
        tracemalloc.start()
        held = [user_site(depth=depth) for _ in range(2000)]
        size = tracemalloc.get_traced_memory()[0] / len(held)
        tracemalloc.stop()
        t0 = time.perf_counter()
        for _ in range(calls):
            user_site(depth=depth)
        return (time.perf_counter() - t0) / calls * 1e6, size
    return _nested(40, measure)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=2000)
    ap.add_argument("--syncs", type=int, default=10000)
    ap.add_argument("--out", type=Path, help="also write the printed lines here")
    args = ap.parse_args(argv)
    lines = [f"# syncguard session report size: {args.tests} tests x 1 site x {args.syncs} syncs",
             f"python {platform.python_version()}, {platform.platform()}, "
             f"{os.cpu_count()} CPU(s); bench/bench_report_size.py"]
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        (project / "src").mkdir(parents=True)
        entries, spent = suite(project, args.tests, args.syncs)
        path = project / "report.json"
        sf = SessionFile(path, {"mode": "record"})
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            sf.write(entries, complete=True)
            times.append(time.perf_counter() - t0)
        size = path.stat().st_size
        t0 = time.perf_counter()
        doc = load_document(path)
        read_s = time.perf_counter() - t0
        counted = sum(r.count for t in doc["tests"] for r in t.syncs)
        records = sum(len(t.syncs) for t in doc["tests"])
        frames = len(json.loads(path.read_text())["frames"])
        one = per_event_bytes(project, args.syncs)
    write_s = statistics.median(times)
    per_event_total = one * args.tests
    n_events = args.tests * args.syncs
    lines += [
        f"events: {n_events:,}; records stored: {records:,}; syncs they count: {counted:,}; "
        f"distinct frames in the table: {frames:,}",
        f"report size: {size:,} bytes ({size / 2**20:.2f} MiB); target < 2 MiB: "
        f"{'met' if size < TARGET_BYTES else 'NOT met'}",
        f"write time (median of 3, SessionFile.write incl. fsync): {write_s:.3f} s "
        f"(runs: {', '.join(f'{t:.3f}' for t in times)}); target < 1 s: "
        f"{'met' if write_s < TARGET_WRITE_S else 'NOT met'}",
        f"read back (load_document): {read_s:.3f} s",
        f"aggregation (during the run, per test): {spent / args.tests * 1e3:.2f} ms per test, "
        f"{spent / n_events * 1e9:.0f} ns per event",
        f"per-event storage (schema 1) of one test: {one:,} bytes; x {args.tests} tests = "
        f"{per_event_total:,} bytes ({per_event_total / 2**30:.2f} GiB, extrapolated)",
        f"ratio per-event / per-site: {per_event_total / size:,.0f}x",
    ]
    (t8, b8), (t32, b32) = stack_cost(8), stack_cost(32)
    lines += [f"attribution per sync (detect.user_site, 40 frames deep): 8 frames {t8:.2f} us, "
              f"{b8:.0f} B held; 32 frames (the default, for the code scope) {t32:.2f} us, "
              f"{b32:.0f} B held; ratio {t32 / t8:.2f}x"]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
