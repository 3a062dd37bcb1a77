"""Run both snippet corpora against ground truth measured in the same process; write the evidence.

    python tools/corpus_report.py --out DIR          # on a GPU: DIR/corpus-run-<torch>.{json,md}
    python tools/corpus_report.py --out DIR --with-merge-bench   # + DIR/merge-split-<torch>.json
    python tools/corpus_report.py --convert OLD.json --out DIR   # schema-1 corpus run -> schema 2

What runs, per snippet of tests/gpu/corpus.py, tests/gpu/library_corpus.py (LIBRARY) and its
CASES (merge variants x deterministic mode, CPU-path batching), one snippet at a time:

1. warm-up: the snippet once outside any region (lazy initialisation is not what we audit);
2. ``syncguard.audit()`` with the library's default detectors, while a helper thread keeps
   syncing (``.item()`` in a loop): a region must never report that thread's syncs;
3. ground truth: the PyTorch profiler's CUDA runtime trace (sync, copy and free calls, with the
   GPU-side memcpy record that names direction and pageable/pinned memory, matched by correlation
   id) plus torch's sync-debug mode, around exactly the snippet's call;
4. ``syncguard.audit(detectors="debug,trace,profile")`` when syncguard still knows those names
   (read from syncguard at run time).

Step 2 runs for every snippet before any profiler starts: a CUPTI subscriber cannot attach once
the profiler has run in a process. The helper thread holds still while each region opens and
closes (see ``Noise.still``). Where the profiler itself fails in this process (torch's
INTERNAL ASSERT), step 3 is repeated for those snippets in a child process of the same run that
never held CUPTI, and each such truth says so (``process: "child"``, ``in_process_error``). One failing snippet is recorded and the run goes on. The
ground truth is this file's own reading of the trace, never syncguard's classification.
Without CUDA it prints one "no CUDA" line and exits 0.

The JSON is a corpus run as :mod:`syncguard.atlas.runs` defines it (``syncguard atlas`` reads it):
``provenance`` (torch, CUDA, GPU, driver, git commit, a digest of the sources, when, how long),
``detector_sets``, ``noise_syncs``, ``summary`` (agreement counts per detector set) and
``snippets``: per snippet its id, file and line, ``error``, ``truth`` (``ok``, ``syncs``,
``waits``: api/kind/direction/memory/op, ``calls``: runtime calls by name, ``debug_flags``),
``detectors`` (per set: ``ran``, ``why``, ``syncs``, ``allowed``, ``notes``) and ``agreement``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from syncguard.atlas.runs import dumps_run, new_run, wait_text  # noqa: E402  (the run document; one spelling of a cell)
from syncguard.detectors.profiler import markers_around  # noqa: E402  (one rule for "inside a marker")

MARKER = "corpus_report::snippet"
SYNC_WARNING = "called a synchronizing CUDA operation"
WAIT_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaFree")
COPY_KINDS = ("blocking_copy_d2h", "blocking_copy_h2d", "pageable_copy")
NOISE_THREAD = "corpus-noise"
TRUTH = "the profiler's CUDA runtime trace + sync-debug mode, same run"


# ---------------------------------------------------------------------------------------------
# The snippets of all corpora, in one shape.

def cases() -> list[dict]:
    from tests.gpu import corpus, library_corpus as lib

    out = []
    for s in corpus.SNIPPETS:
        lines, start = __import__("inspect").getsourcelines(s.fn)
        out.append(dict(id=f"corpus/{s.name}", corpus="corpus", name=s.name, group="corpus",
                        fn=s.fn, setup=None, context=None, capture=False,
                        line=s.sync_line or start + len(lines) - 1, file="tests/gpu/corpus.py",
                        doc=(s.fn.__doc__ or "").strip(), source=None))
    for kind, snippets in (("library", lib.LIBRARY), ("cases", lib.CASES)):
        for s in snippets:
            out.append(dict(id=f"{kind}/{s.name}", corpus=kind, name=s.name, group=s.group,
                            fn=s.fn, setup=s.setup, context=s.context, capture=s.capture,
                            line=s.call_line, file="tests/gpu/library_corpus.py", doc=s.doc,
                            source=s.source))
    return out


def states() -> dict:
    from tests.gpu import corpus, library_corpus as lib

    made = {}
    for name, make in (("corpus", corpus.state), ("library", lib.state), ("cases", lib.case_state)):
        try:
            made[name] = make()
        except Exception as e:  # noqa: BLE001 - every snippet of that corpus records it
            made[name] = e
    return made


def invoke(case: dict, st, region) -> None:
    """Set-up and context outside the region; only the snippet's call inside it."""
    import torch

    if isinstance(st, Exception):
        raise RuntimeError(f"state of corpus {case['corpus']} failed: {st!r}")
    ctx = case["context"]() if case["context"] else contextlib.nullcontext()
    with ctx:
        if case["setup"]:
            case["setup"](st)
        torch.cuda.synchronize()
        with region:
            case["fn"](st)


def warm(case: dict, made: dict) -> None:
    """Step 1: the snippet twice outside any region (lazy initialisation is not audited)."""
    for _ in range(2):
        invoke(case, made[case["corpus"]], contextlib.nullcontext())


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


# ---------------------------------------------------------------------------------------------
# Ground truth: the profiler's runtime trace + sync-debug mode, read here.

def _device_event(e) -> bool:
    return str(getattr(e, "device_type", "")).endswith("CUDA")


def _copy_facts(name: str) -> tuple[str | None, str | None]:
    """``Memcpy HtoD (Pageable -> Device)`` -> ("h2d", "pageable")."""
    direction = ("h2d" if "HtoD" in name else "d2h" if "DtoH" in name else
                 "d2d" if "DtoD" in name else None)
    memory = "pageable" if "Pageable" in name else "pinned" if "Pinned" in name else None
    return direction, memory


def _ops(e, marker) -> list:
    """The op events (``aten::…``) around a runtime call, outermost first; Python-call and
    annotation events in between are skipped."""
    chain, p = [], e.cpu_parent
    while p is not None and p is not marker:
        if "::" in p.name:
            chain.append(p)
        p = p.cpu_parent
    return chain[::-1]




def read_trace(events) -> dict:
    """Waits in the marker's range: one entry per host wait, with API, kind, direction, memory
    and aten op. A stream sync that follows a copy issued by the same op completes that copy
    (a blocking copy); an async copy from pageable memory with no sync after it is a pageable
    copy (CUDA stages it and the host waits); a pinned async copy is no wait."""
    markers = [e for e in events if e.name == MARKER]
    if not markers:
        return {"ok": False, "why": "the profiler recorded no range for the snippet", "waits": [],
                "calls": {}}
    marker = markers[0]
    device_copies = {e.id: e.name for e in events if _device_event(e) and "Memcpy" in e.name}
    calls = [e for e in events if not _device_event(e) and e.name.startswith("cuda")]
    around = markers_around(calls, [marker])
    runtime = sorted((e for e in calls if around[id(e)]), key=lambda e: e.time_range.start)
    calls = Counter(e.name for e in runtime)
    waits, pending, nth = [], {}, Counter()
    for e in runtime:
        api, ops = e.name, _ops(e, marker)
        op = ops[-1].name if ops else None
        key = id(ops[-1]) if ops else None  # the innermost op: a copy and its sync share it
        if api.startswith("cudaMemcpy"):
            record = device_copies.get(e.id)
            if record is None:  # no correlation match: the op's own memcpy records, in order
                mine = [k.name for k in getattr(ops[-1] if ops else None, "kernels", ())
                        if "Memcpy" in k.name]
                record = mine[nth[key]] if key is not None and nth[key] < len(mine) else ""
            nth[key] += 1
            direction, memory = _copy_facts(record)
            copy = dict(api=api, direction=direction, memory=memory, op=op, record=record)
            if direction in ("h2d", "d2h"):
                if not api.endswith("Async"):
                    waits.append(dict(copy, kind=f"blocking_copy_{direction}"))
                else:
                    pending.setdefault(key, []).append(copy)
        elif api == "cudaStreamSynchronize":
            copy = pending[key].pop() if key is not None and pending.get(key) else None
            if copy:
                waits.append(dict(copy, api=f"{copy['api']}+{api}",
                                  kind=f"blocking_copy_{copy['direction']}"))
            else:
                waits.append(dict(api=api, kind="stream_sync", direction=None, memory=None, op=op))
        elif api in WAIT_APIS:
            kind = {"cudaDeviceSynchronize": "device_sync", "cudaEventSynchronize": "event_sync",
                    "cudaFree": "implicit_free"}[api]
            waits.append(dict(api=api, kind=kind, direction=None, memory=None, op=op))
    for copies in pending.values():
        for copy in copies:
            if copy["memory"] == "pageable":
                waits.append(dict(copy, kind="pageable_copy"))
    for w in waits:
        w.pop("record", None)
    return {"ok": True, "waits": waits, "calls": dict(calls)}


def measure_truth(case: dict, st) -> dict:
    import torch
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    class Region:
        def __enter__(self):
            self.prev = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
            self.rf = record_function(MARKER)
            self.rf.__enter__()

        def __exit__(self, *exc):
            self.rf.__exit__(*exc)
            torch.cuda.set_sync_debug_mode(self.prev)
            return False

    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with prof:
            invoke(case, st, Region())
    truth = read_trace(prof.events())
    flags = [w for w in caught if SYNC_WARNING in str(w.message)]
    truth["debug_flags"] = len(flags)
    if flags and not truth["waits"]:
        truth["waits"] = [dict(api="cudaStreamSynchronize", kind="stream_sync", direction=None,
                               memory=None, op=None, source="sync-debug mode only")]
    truth["syncs"] = bool(truth["waits"])
    return truth


# ---------------------------------------------------------------------------------------------
# The detectors, through the public API only.

def detector_sets() -> dict[str, str | None]:
    """``default``, plus "debug,trace,profile" where syncguard still knows all three names."""
    try:  # the detector registry, where this syncguard has one
        from syncguard.detectors import names as registered

        names = tuple(registered())
    except ImportError:
        names = ()
    if not names:
        from syncguard.records import events

        names = tuple(getattr(events, "ALL_DETECTORS", ()))
    sets = {"default": None}
    if all(n in names for n in ("debug", "trace", "profile")):
        sets["debug,trace,profile"] = "debug,trace,profile"
    return sets


_KNOWN_FIELDS = ("api", "kind", "op", "filename", "lineno", "function", "thread", "detectors",
                 "note", "stack")


def _memory_of(event) -> str | None:
    for attr in ("memory", "host_memory"):
        value = getattr(event, attr, None)
        if value in ("pageable", "pinned"):
            return value
    if getattr(event, "pageable", None) is not None:
        return "pageable" if event.pageable else "pinned"
    if event.kind == "pageable_copy":
        return "pageable"
    text = f"{event.kind} {getattr(event, 'note', '') or ''}".lower()
    return "pageable" if "pageable" in text else "pinned" if "pinned" in text else None


def _event_dict(e) -> dict:
    d = e.to_dict() if hasattr(e, "to_dict") else {k: getattr(e, k, None) for k in _KNOWN_FIELDS}
    out = {k: d.get(k) for k in ("api", "kind", "op", "lineno", "function", "thread", "detectors",
                                  "note")}
    out["file"] = os.path.relpath(d["filename"], ROOT) if d.get("filename") else None
    out["stack"] = [os.path.relpath(s, ROOT) if s.startswith(ROOT) else s
                    for s in d.get("stack") or ()][:6]
    out["memory"] = _memory_of(e)
    out.update({k: v for k, v in d.items() if k not in out and k not in ("filename",
                                                                         "host_blocked_us",
                                                                         "reason")})
    return out


def measure_detectors(case: dict, st, detectors: str | None, edges=contextlib.nullcontext) -> dict:
    """``edges()`` wraps the region's entry and its exit (the noise thread holds still there)."""
    import syncguard

    region = syncguard.audit() if detectors is None else syncguard.audit(detectors=detectors)
    holder = {}

    class Region:
        def __enter__(self):
            with edges():
                holder["report"] = region.__enter__()

        def __exit__(self, *exc):
            with edges():
                return region.__exit__(*exc)

    invoke(case, st, Region())
    rep = holder["report"]
    return {"ran": list(rep.detectors), "reason": getattr(rep, "reason", None),
            "why": getattr(rep, "detector_reason", None),
            "syncs": [_event_dict(e) for e in rep.syncs],
            "allowed": [_event_dict(e) for e in rep.allowed],
            "notes": list(getattr(rep, "notes", []))}


class Noise:
    """A helper thread that keeps syncing while the default detectors audit the snippets."""

    def __init__(self):
        import torch

        self.t = torch.ones(16, device="cuda")
        self.stop, self.count, self.hold = threading.Event(), 0, False
        self.lock = threading.Lock()  # held for each sync; paused() takes it to keep CUDA quiet
        self.thread = threading.Thread(target=self._loop, name=NOISE_THREAD, daemon=True)

    def _loop(self):
        while not self.stop.is_set():
            with self.lock:
                if not self.hold:
                    float(self.t.sum())  # a D2H read and a stream sync on this thread
                    self.count += 1
            time.sleep(0.0002)

    @contextlib.contextmanager
    def still(self):
        """No CUDA call of this thread in flight meanwhile. Used around each region's entry and
        exit: a region that ended while this thread was inside a CUDA call left torch 2.11's next
        profiler session failing Kineto's duplicate flow-id assert (collection.cpp:1152) for
        every copy (reports/probes/profiler-after-2.11.0/); the syncs this thread makes while the
        region is open are what the pass is about."""
        with self.lock:
            yield

    @contextlib.contextmanager
    def paused(self, pause: bool):
        """No sync from this thread meanwhile (a CUDA graph capture forbids them)."""
        if pause:
            with self.lock:
                self.hold = True
        try:
            yield
        finally:
            self.hold = False


# ---------------------------------------------------------------------------------------------
# Judging one snippet's detector output against its ground truth.

def _key(kind: str, memory: str | None, with_memory: bool) -> str:
    return f"{kind}/{memory or '?'}" if with_memory and kind in COPY_KINDS else kind


def _line_ok(case: dict, e: dict) -> bool:
    """On the snippet's line; or on a line of user code the snippet's line called (its own
    file's helper, e.g. a compiled function's ``.item()`` at a graph break, or cases/ for the
    cases corpus), with the snippet's line below it on the stack: the innermost user frame is
    where syncguard attributes a sync, and it is the snippet's own code."""
    site = f"{case['file']}:{case['line']}"
    if e.get("file") == case["file"] and e.get("lineno") == case["line"]:
        return True
    users_code = e.get("file") == case["file"] or case["corpus"] == "cases"
    return users_code and any(s.startswith(site + " ") or s == site for s in e.get("stack") or ())


def judge(case: dict, truth: dict, det: dict) -> dict:
    events = det["syncs"] + det["allowed"]
    other = [e for e in events if e.get("thread") not in (None, "", "MainThread")
             or NOISE_THREAD in str(e.get("thread"))]
    mine = [e for e in events if e not in other]
    out = {"syncs": bool(mine) == truth["syncs"], "other_threads": len(other)}
    if truth["syncs"]:  # a miss counts against the kind too
        for name, mem in (("kind", False), ("kind_memory", True)):
            want = {_key(w["kind"], w.get("memory"), mem) for w in truth["waits"]}
            got = {_key(e["kind"], e.get("memory"), mem) for e in mine}
            out[name] = want == got
    out["lines_ok"] = sum(_line_ok(case, e) for e in mine)
    out["lines"] = len(mine)
    return out


# ---------------------------------------------------------------------------------------------
# The run.

def provenance(started: float) -> dict:
    from syncguard.reporting.sessionfile import environment

    env = environment()
    from syncguard.reporting import provenance as prov

    commit = (prov.git_state(ROOT) or {}).get("commit")  # honours SYNCGUARD_GIT_COMMIT
    digest = hashlib.sha256("".join(prov.code_digest(os.path.join(ROOT, sub)) for sub in (
        "src", "tests/gpu", "cases", "tools")).encode())
    return {**env, "git_commit": commit, "source_sha256": digest.hexdigest()[:16],
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 1)}


#: SYNCGUARD_CORPUS_TRACE=1: name each snippet before it runs
_TRACE = os.environ.get("SYNCGUARD_CORPUS_TRACE") == "1"


def each(title: str, todo: list[dict], fn) -> dict:
    """``fn`` on every snippet; one that raises is recorded as ``{"error": ...}``, never fatal."""
    t0, out = time.time(), {}
    for c in todo:
        if _TRACE:  # the snippet a crash happened in (faulthandler prints the Python stacks)
            print(f"  {title.split('.')[0]}. {c['id']}", flush=True)
        try:
            out[c["id"]] = fn(c)
        except Exception as e:  # noqa: BLE001 - one failing snippet must not abort the run
            out[c["id"]] = {"error": _error(e)}
    failed = sum(1 for v in out.values() if isinstance(v, dict) and "error" in v)
    print(f"{title}: {len(todo)} snippets, {failed} failed, {time.time() - t0:.1f} s", flush=True)
    return out


def run() -> dict:
    import torch

    started = time.time()
    # graph captures last: a capture that goes wrong cannot disturb the snippets after it
    todo, made = sorted(cases(), key=lambda c: c["capture"]), states()
    rows = {c["id"]: {"id": c["id"], "corpus": c["corpus"], "name": c["name"], "group": c["group"],
                      "file": c["file"], "line": c["line"], "doc": c["doc"],
                      "source": c["source"],
                      "error": None, "truth": None, "detectors": {}, "agreement": {}}
            for c in todo}
    for cid, got in each("1. warm-up", todo, lambda c: warm(c, made)).items():
        if got and "error" in got:
            rows[cid]["error"] = f"warm-up: {got['error']}"
    live = [c for c in todo if rows[c["id"]]["error"] is None]
    torch.cuda.synchronize()
    sets = detector_sets()
    noise = Noise()
    noise.thread.start()

    def default(c):
        with noise.paused(c["capture"]):
            return measure_detectors(c, made[c["corpus"]], None, edges=noise.still)

    try:
        for cid, got in each("2. default detectors, a helper thread syncing", live, default).items():
            rows[cid]["detectors"]["default"] = got
    finally:
        noise.stop.set()
        noise.thread.join(5)
    for cid, got in each("3. ground truth", live,
                         lambda c: measure_truth(c, made[c["corpus"]])).items():
        rows[cid]["truth"] = got if "error" not in got else {
            "ok": False, "why": got["error"], "waits": [], "syncs": None}
    retry = [c for c in live if "INTERNAL ASSERT" in (rows[c["id"]]["truth"].get("why") or "")]
    if retry:  # the profiler itself broke in this process: measure those again in a fresh one
        for cid, got in truth_in_child([c["id"] for c in retry]).items():
            got["in_process_error"] = rows[cid]["truth"]["why"]
            rows[cid]["truth"] = got
    truths = [rows[c["id"]]["truth"] for c in live]
    if truths and not any(t.get("calls") for t in truths):
        # not one CUDA runtime call in any snippet: the profiler saw nothing (CUPTI held by
        # another subscriber?), so there is no ground truth in this run at all
        for t in truths:
            t.update(ok=False, syncs=None, why="the profiler recorded no CUDA runtime call in "
                                               "any snippet (CUPTI unavailable to it?)")
    for name, dets in sets.items():  # 4. the profile-inclusive set
        if dets is not None:
            for cid, got in each(f"4. detectors={dets}", live,
                                 lambda c: measure_detectors(c, made[c["corpus"]], dets)).items():
                rows[cid]["detectors"][name] = got
    for c in todo:
        row = rows[c["id"]]
        truth = row["truth"]
        for name, det in row["detectors"].items():
            if truth and truth.get("ok") and "error" not in det:
                row["agreement"][name] = judge(c, truth, det)
    named = {n: d or "default" for n, d in sets.items()}
    snippets = list(rows.values())
    return new_run(provenance(started), named, noise.count, snippets,
                   summarize({"detector_sets": named, "snippets": snippets}))


def truth_in_child(ids: list[str]) -> dict:
    """Step 3 for ``ids`` in a child process of this run that never held CUPTI (warm-up, then
    the profiler). Each truth it returns says ``process: "child"``; one it could not measure
    says why."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--truth-child", *ids],
                          capture_output=True, text=True, timeout=900)
    try:
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        why = f"child process for the ground truth: exit {proc.returncode}, {proc.stderr[-200:]!r}"
        return {i: {"ok": False, "why": why, "waits": [], "syncs": None} for i in ids}
    return got


def child_truth(ids: list[str]) -> dict:
    """The child's side of :func:`truth_in_child`: warm-up and ground truth only."""
    import torch

    todo, made = [c for c in cases() if c["id"] in set(ids)], states()
    out = {}
    for c in todo:
        try:
            warm(c, made)
            torch.cuda.synchronize()
            out[c["id"]] = dict(measure_truth(c, made[c["corpus"]]), process="child")
        except Exception as e:  # noqa: BLE001 - recorded per snippet
            out[c["id"]] = {"ok": False, "why": _error(e), "waits": [], "syncs": None,
                            "process": "child"}
    return out


def summarize(doc: dict) -> dict:
    """Agreement figures per detector set, against the ground truth of the same run."""
    out = {}
    for name in doc["detector_sets"]:
        judged = [r["agreement"][name] for r in doc["snippets"] if name in r["agreement"]]
        kinds = [a for a in judged if "kind" in a]
        out[name] = {
            "judged": len(judged),
            "syncs_agree": sum(a["syncs"] for a in judged),
            "kind_judged": len(kinds),
            "kind_agree": sum(a["kind"] for a in kinds),
            "kind_memory_agree": sum(a["kind_memory"] for a in kinds),
            "events": sum(a["lines"] for a in judged),
            "events_on_line": sum(a["lines_ok"] for a in judged),
            "other_threads": sum(a["other_threads"] for a in judged),
        }
    out["snippets"] = len(doc["snippets"])
    out["failed"] = sum(1 for r in doc["snippets"] if r["error"])
    out["truth_syncs"] = sum(1 for r in doc["snippets"] if (r["truth"] or {}).get("syncs"))
    return out


# ---------------------------------------------------------------------------------------------
# Output.

def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "–"


def _child_note(doc: dict) -> str:
    moved = [r for r in doc["snippets"] if (r["truth"] or {}).get("process") == "child"]
    if not moved:
        return ""
    why = moved[0]["truth"].get("in_process_error") or "–"
    return (f" The ground truth of {len(moved)} snippet(s) was measured in a child process of "
            f"this run, after the profiler in this process failed ({why[:120]}).")


def markdown(doc: dict) -> str:
    p, s = doc["provenance"], doc["summary"]
    md = [f"# Corpus run: torch {p['torch']} on {p.get('gpu')} (driver {p.get('driver')})", "",
          f"Commit `{p.get('git_commit') or '–'}`, sources `{p.get('source_sha256') or '–'}`, "
          f"CUDA {p.get('cuda_runtime')}, run {p.get('created') or '–'} "
          f"({p.get('duration_s') or '–'} s). "
          f"Ground truth: {p.get('truth_source') or TRUTH}. "
          f"{s['snippets']} snippets, {s['failed']} failed to run, {s['truth_syncs']} sync." +
          _child_note(doc), "",
          "| detectors (ran) | whether it syncs | exact kind (direction; pageable copy) | "
          "kind + host memory of every copy named | events on the snippet's line | "
          "events from other threads |", "|---|---|---|---|---|---|"]
    for name in doc["detector_sets"]:
        f = s[name]
        ran = sorted({",".join(r["detectors"][name].get("ran", [])) for r in doc["snippets"]
                      if name in r["detectors"] and "ran" in r["detectors"][name]})
        md.append(f"| {name} ({'; '.join(ran) or '–'}) | {_pct(f['syncs_agree'], f['judged'])} | "
                  f"{_pct(f['kind_agree'], f['kind_judged'])} | "
                  f"{_pct(f['kind_memory_agree'], f['kind_judged'])} | "
                  f"{_pct(f['events_on_line'], f['events'])} | {f['other_threads']} |")
    noise = doc.get("noise_syncs")
    md += ["", "Targets (default): 100% / ≥98% / – / 100% / 0. " + (
               f"A helper thread synced {noise} times during the default pass." if noise is not None
               else "No helper thread ran (converted run)."), "",
           "| snippet | ground truth (kind[direction/memory]) | API · aten op | " +
           " | ".join(doc["detector_sets"]) + " | verdict |",
           "|---|---|---|" + "---|" * len(doc["detector_sets"]) + "---|"]
    for r in doc["snippets"]:
        t = r["truth"] or {}
        if r["error"] or not t.get("ok"):
            md.append(f"| `{r['id']}` | not measured: {r['error'] or t.get('why')} | | " +
                      " | " * len(doc["detector_sets"]) + " |")
            continue
        apis = "; ".join(sorted({f"{w['api']}" + (f" · {w['op']}" if w.get('op') else "")
                                 for w in t["waits"]})) or "–"
        dets, verdict = [], []
        for name in doc["detector_sets"]:
            d = r["detectors"].get(name, {})
            if "error" in d:
                dets.append(f"error: {d['error']}")
                continue
            evs = d.get("syncs", []) + d.get("allowed", [])
            dets.append(", ".join(sorted({_key(e["kind"], e.get("memory"), True) for e in evs}))
                        or "clean")
            a = r["agreement"].get(name, {})
            bad = [k for k in ("syncs", "kind", "kind_memory") if a.get(k) is False]
            if a.get("lines_ok", 0) < a.get("lines", 0):
                bad.append("line")
            if a.get("other_threads"):
                bad.append("thread")
            verdict.append(f"{name}: " + ("ok" if not bad else "WRONG " + "+".join(bad)))
        md.append(f"| `{r['id']}` | {wait_text(t['waits'])} | {apis} | " + " | ".join(dets) +
                  f" | {'; '.join(verdict)} |")
    return "\n".join(md) + "\n"


def write(doc: dict, out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    ver = str(doc["provenance"]["torch"]).split("+")[0]
    paths = []
    for suffix, text in ((".json", dumps_run(doc)),
                         (".md", markdown(doc))):
        path = os.path.join(out_dir, f"corpus-run-{ver}{suffix}")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------
# Converting a schema-1 corpus run (tools/corpus_report.py before this one).

_DIRECTION = {"blocking_copy_d2h": "d2h", "blocking_copy_h2d": "h2d"}


def _old_event(e: dict) -> dict:
    return {"api": e["api"], "kind": e["kind"], "op": e.get("op"), "lineno": e.get("line"),
            "file": f"tests/gpu/{e['file']}" if e.get("file") not in (None, "?") else None,
            "function": None, "thread": None, "detectors": e.get("detectors", []),
            "note": None, "stack": [], "memory": "pageable" if e["kind"] == "pageable_copy" else None}


def convert(old: dict, path: str) -> dict:
    """A schema-1 run in schema 2. Its "ground truth" is what that run's ``profile`` detector
    and ``debug`` detector recorded: it had no independent trace, and the provenance says so."""
    if old.get("kind") != "syncguard-corpus" or old.get("schema_version") != 1:
        raise ValueError(f"{path}: not a schema-1 syncguard-corpus run")
    rows = []
    for s in old["snippets"]:
        waits = [dict(api=e["api"], kind=e["kind"], direction=_DIRECTION.get(e["kind"]),
                      memory="pageable" if e["kind"] == "pageable_copy" else None,
                      op=e.get("op") if "::" in str(e.get("op")) else None)  # not Python frames
                 for e in s["profile"]]
        if not waits and s["debug"]:
            waits = [dict(api="cudaStreamSynchronize", kind="stream_sync", direction=None,
                          memory=None, op=None, source="sync-debug mode only")]
        case = {"file": "tests/gpu/corpus.py", "line": s["line"], "corpus": "corpus"}
        truth = {"ok": True, "waits": waits, "syncs": bool(waits), "debug_flags": len(s["debug"]),
                 "calls": {}}
        dets = {"default": {"ran": ["debug", "trace"], "syncs": [_old_event(e) for e in s["both"]],
                            "allowed": [], "notes": s.get("both_notes", [])},
                "debug,trace,profile": {"ran": ["debug", "trace", "profile"],
                                        "syncs": [_old_event(e) for e in s["all"]],
                                        "allowed": [], "notes": s.get("all_notes", [])}}
        rows.append({"id": f"corpus/{s['snippet']}", "corpus": "corpus", "name": s["snippet"],
                     "group": "corpus", "file": case["file"], "line": s["line"], "doc": "",
                     "source": None, "error": None, "truth": truth,
                     "detectors": dets,
                     "agreement": {n: judge(case, truth, d) for n, d in dets.items()}})
    env = dict(old["environment"])
    env.update(git_commit=None, source_sha256=None, created=None, duration_s=None,
               converted_from=os.path.relpath(os.path.abspath(path), ROOT),
               truth_source="schema-1 run: syncguard's profile + debug detectors of that run "
                            "(no independent runtime trace was recorded)")
    named = {"default": "default", "debug,trace,profile": "debug,trace,profile"}
    return new_run(env, named, None, rows, summarize({"detector_sets": named, "snippets": rows}))


def main(argv: list[str] | None = None) -> int:
    faulthandler.enable()  # a crash in native code still names the snippet's Python stack
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="output folder")
    ap.add_argument("--convert", metavar="OLD_JSON", nargs="+",
                    help="no GPU: rewrite schema-1 corpus runs in this schema into --out")
    ap.add_argument("--with-merge-bench", action="store_true",
                    help="then run bench/bench_merge.py --split in its own process, into --out "
                         "as merge-split-<torch>.json (the atlas's merge table)")
    ap.add_argument("--truth-child", metavar="ID", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.truth_child:
        print(json.dumps(child_truth(a.truth_child)))
        return 0
    if a.convert:
        for path in a.convert:
            with open(path, encoding="utf-8") as f:
                print("\n".join(write(convert(json.load(f), path), a.out)))
        return 0
    try:
        import torch
    except ImportError:
        print("corpus_report: no CUDA (torch is not installed); nothing measured, nothing written")
        return 0
    if not torch.cuda.is_available():
        print(f"corpus_report: no CUDA (torch {torch.__version__}); nothing measured, nothing written")
        return 0
    try:
        doc = run()
    except Exception:  # the run itself broke (not one snippet): say so, write nothing half-done
        traceback.print_exc()
        return 1
    for path in write(doc, a.out):
        print(path)
    print(markdown(doc).split("\n\n| snippet")[0])
    if a.with_merge_bench:  # a fresh process: no profiler or CUPTI state carried into timings
        ver = torch.__version__.split("+")[0]
        bench = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_merge.py"),
                                "--split", "--out", os.path.join(a.out, f"merge-split-{ver}.json")])
        print(f"bench_merge --split: exit {bench.returncode}")
        return bench.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
