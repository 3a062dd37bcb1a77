"""Audit overhead, measured side by side in one run (not a test).

    python bench/bench_overhead.py --out DIR

Three workloads: 2,000 tiny kernels (launch-bound, the worst case for any per-op hook), 100
calls of the sync-free merge ``emb[cpu_mask] = rows``, and a training step of a 4-layer
TransformerEncoder (d=512) with AdamW on a batch of 8x128. Each configuration is timed in
interleaved rounds (wall clock around the loop, CUDA synchronised before and after, the region
opened and closed inside the timing; ``enter_ms``/``exit_ms`` say how much of it that was) and
reported as the median over rounds. The rounds follow a Williams design (:mod:`bench.design`):
over one cycle of its rows, every configuration runs at every position, and right after every
other configuration, equally often, so neither a position's cost nor what one configuration
leaves behind for the next lands on one configuration in particular. (Up to the matrix at 0a2bca4 each
round ran one cycle started one later: positions were balanced, predecessors were not, and bare always
followed the fallback.) ``--rounds`` is rounded up to whole cycles. ``bare (A/A control)`` is
the bare loop again, as a configuration of its own: its ratio to bare is what the design and
the host's noise alone give. The ratio to bare (``ratio``) is the median over rounds of the
configuration's time over the bare loop's time in the same round (adjacent in time, so slow
drift of the shared host's load cancels), with its quartiles; beside it, the ratio of the two
medians and of the two best rounds (timeit's convention: noise only adds time). The JSON keeps
every round's times and order (``rounds_ms``, ``round_orders``).

Order matters: once torch.profiler has run in a process, CUPTI cannot be subscribed again (one
subscriber per process), so every cuda-detector configuration is timed before any profiler one.
The cuda detector is timed with both ways of telling pageable from pinned host memory
(``activity``: CUPTI MEMCPY records; ``pointer``: cudaPointerGetAttributes at region exit).

Where the cuda detector's cost comes from (issue 12: 100 merges were 1.6x) is split by three
raw CUPTI subscriptions with no syncguard region, each adding one layer:

* ``cupti: subscribed, no id enabled``: the subscription alone;
* ``cupti: detector's ids, C no-op callback``: CUPTI's own per-callback cost (the callback is
  libc's ``abs``, which ignores its arguments: no Python, no GIL);
* ``cupti: detector's ids, Python no-op callback``: plus the ctypes thunk and re-taking the GIL
  that torch released around the CUDA call;
* ``audit(cuda) pointer``: plus the detector's own work and its region entry and exit
  (``enter_ms``/``exit_ms``: time spent entering and leaving the region, inside the timing), with
  the C callback where it is built (``callback`` in the JSON says which ran);
* ``audit(cuda) pointer, Python callback``: the same with the Python callback, side by side.

An untimed pass per workload then records which CUDA APIs one call of the workload makes
(``apis``: syncguard.detectors.cuda.cupti.api_census, both whole domains), and which of them the
detector's ids catch (``detector_callbacks``).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import syncguard  # noqa: E402
from bench import _write, emit  # noqa: E402
from bench.design import round_order, whole_cycles  # noqa: E402
from bench.workloads import mask_merges, merge_state, tiny_kernels, train_step  # noqa: E402


def tiny_loop(st):
    tiny_kernels(st, 2000)


def merge_loop(st):
    mask_merges(st, 100)


@contextlib.contextmanager
def bare():
    yield


def prof(acts, stack):
    @contextlib.contextmanager
    def cm():
        with profile(activities=acts, with_stack=stack):
            yield
    return cm


def timed(work, cm, st):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with cm():
        work(st)
        torch.cuda.synchronize()
    return time.perf_counter() - t0


DEFAULT = "audit(cuda) pointer"  # the default detector's row: the one the target is about
EXIT_MS: dict = collections.defaultdict(list)  # configuration -> ms spent leaving the region
ENTER_MS: dict = collections.defaultdict(list)  # configuration -> ms spent entering it


def cuda_with(hostmem, name, callback="default"):
    """audit(cuda) with the hub's pageable/pinned method ``hostmem``; ``callback="python"`` gives
    CUPTI the Python callback even where the C one is built (switched between regions only)."""
    from syncguard.detectors.cuda.detector import HUB

    @contextlib.contextmanager
    def cm():
        HUB.unavailable()  # loads CUPTI and picks the callback before it is saved below
        saved, HUB.hostmem = HUB.hostmem, hostmem
        fast = HUB.fast
        if callback == "python":
            HUB.fast = None
        try:
            t_enter = time.perf_counter()
            with syncguard.audit(("cuda",)) as rep:
                ENTER_MS[name].append((time.perf_counter() - t_enter) * 1e3)
                yield rep
                t_body = time.perf_counter()
            EXIT_MS[name].append((time.perf_counter() - t_body) * 1e3)
            assert rep.detectors == ("cuda",), rep.notes
        finally:
            HUB.hostmem, HUB.fast = saved, fast
    return cm


COUNTS: collections.Counter = collections.Counter()  # domain*100000+cbid -> callbacks (ENTER+EXIT)


def _count(userdata, domain, cbid, cbdata):
    # an int key, no tuple: nothing GC-tracked is allocated inside the callback, so no collection
    # can free a tensor (and call CUDA) from within it
    COUNTS[domain * 100000 + cbid] += 1


def cupti_raw(callback, ids, name=None):
    """Subscribe CUPTI directly (no region), enabling ``ids``: "none" or "detector" (the
    detector's own callback ids). Subscribing and enabling (one ctypes call per id) and
    unsubscribing are timed inside the round, as a region's entry and exit are; with ``name``
    they are also recorded under it (``enter_ms``/``exit_ms``, ``ratio_inside``), so that CUPTI's
    own per-callback cost is read without them, as the region's is without its entry and exit.
    (Until this was recorded, the C no-op row's ratio held its ~45 ctypes calls too.)"""
    from syncguard.detectors.cuda import cupti as C
    from syncguard.detectors.cuda.detector import HUB

    why = HUB.unavailable()
    if why:
        raise RuntimeError(f"cuda detector unavailable: {why}")
    lib = HUB.lib.lib
    if callback == "c":  # abs(int) reads its first argument only: a C function that does nothing
        cb = ctypes.cast(ctypes.CDLL(None).abs, C.CALLBACK)
    else:
        cb = C.CALLBACK(_count)

    @contextlib.contextmanager
    def cm():
        with HUB.lent():  # the hub keeps CUPTI between regions: lent for the row (untimed below)
            with raw():
                yield

    @contextlib.contextmanager
    def raw():
        t_enter = time.perf_counter()
        handle = ctypes.c_void_p()
        code = lib.cuptiSubscribe(ctypes.byref(handle), cb, None)
        if code != C.SUCCESS:
            raise RuntimeError(f"cuptiSubscribe failed: {HUB.lib.error_name(code)}")
        done = False
        try:
            if ids == "detector":
                for domain, cbid in HUB.table:
                    HUB.lib.check(lib.cuptiEnableCallback(1, handle, domain, cbid), "enable")
            if name:
                ENTER_MS[name].append((time.perf_counter() - t_enter) * 1e3)
            yield
            done = True
        finally:
            t_exit = time.perf_counter()
            lib.cuptiUnsubscribe(handle)
            if done and name:  # as cuda_with: a round that failed records no exit
                EXIT_MS[name].append((time.perf_counter() - t_exit) * 1e3)
    return cm


def apis_called(work, st) -> dict:
    """Which CUDA runtime/driver APIs one call of ``work`` makes, and which the detector sees;
    and what one ``audit(cuda)`` region around it holds at exit (``region``: its observations,
    how many of them carry the stream sync that completed them, and its events)."""
    from syncguard.detectors.cuda.detector import HUB
    from syncguard.detectors.cuda.cupti import api_census, named_counts

    with HUB.lent(who="api_census"):  # the hub keeps CUPTI between regions
        out = {"apis": api_census(HUB.lib, lambda: timed(work, bare, st))}
    COUNTS.clear()
    timed(work, cupti_raw("py", "detector"), st)
    out["detector_callbacks"] = named_counts(HUB.lib, COUNTS)
    region = syncguard.audit(("cuda",))
    fast = HUB.fast
    if fast is not None:  # count the C callback's ENTERs by path (its piece timing; untimed here)
        fast.timing(True)
    try:
        timed(work, lambda: region, st)
    finally:
        pieces = fast.timing(False) if fast is not None else {}
    obs = region.observations
    out["region"] = {"observations": len(obs), "callback": HUB.callback,
                     "carrying their stream sync": sum(getattr(o, "paired_api", None) is not None
                                                       for o in obs),
                     # pairs like the call's own, folded into it (_cuptifast's fold_pair)
                     "pairs folded": sum(len(getattr(o, "folded_pairs", ())) for o in obs),
                     "events": len(region.report.syncs) + len(region.report.allowed)}
    if pieces:  # the C callback: how many calls took the GIL, how many were repeats without it
        out["region"]["ENTERs that took the GIL"] = pieces["ENTER: take the GIL"][1]
        out["region"]["repeats kept without the GIL"] = pieces.get(
            "ENTER: a repeat, folded or paired without the GIL (repeat())", (0, 0))[1]
    return out


def region_pieces(reps: int = 41) -> dict:
    """Where a cuda region's entry and exit time goes: each step the hub takes, timed alone
    (median of ``reps``), outside any region; and an empty ``audit(cuda)`` for the total."""
    from syncguard.detectors.cuda.hub import HUB, unwrap, wrap_profiler

    HUB.unavailable()
    times: dict = collections.defaultdict(list)

    def clock(name, fn):
        t0 = time.perf_counter()
        out = fn()
        times[name].append((time.perf_counter() - t0) * 1e3)
        return out

    for _ in range(reps):
        torch.cuda.synchronize()
        with syncguard.audit(("cuda",)):
            t_in = time.perf_counter()
        t_out = time.perf_counter()
        times["empty audit(cuda): enter + exit"].append((t_out - t_in) * 1e3)
        if HUB.subscribed:  # the subscription is kept between regions: given back and taken again
            with HUB.lock:
                clock("give CUPTI back (gate shut, ids off, drained, unsubscribed)", HUB._give_back)
                clock(f"take it again (subscribe, enable the {len(HUB.table)} ids; {HUB.callback})",
                      HUB._take)
                clock("disable the ids", lambda: HUB._switch(0))
                clock("enable them", lambda: HUB._switch(1))
        saved = clock("wrap the profiler's start and stop",
                      lambda: wrap_profiler(HUB.hand_over, HUB.take_back))
        clock("unwrap it", lambda: unwrap(saved))
        clock("install the backward-engine proxy", HUB.backward.install)
        clock("restore the engine", HUB.backward.restore)
        clock("torch.cuda.is_current_stream_capturing()", torch.cuda.is_current_stream_capturing)
    return {k: round(statistics.median(v), 4) for k, v in times.items()}


def region_breakdown(work, st, reps: int = 21) -> dict:
    """The steps of a real ``audit(cuda)`` around ``work``, each timed where it runs: the
    region's, the hub's and torch's functions it calls are wrapped with a clock for this pass
    only, then restored. ms per region (total over ``reps`` regions / reps); nested steps are
    inside their callers' figures."""
    import syncguard.detectors as registry
    import syncguard.regions.region as scope
    from syncguard.detectors.cuda import detector as cuda_mod
    from syncguard.detectors.cuda.detector import HUB

    HUB.unavailable()
    total: dict = collections.defaultdict(float)

    def clocked(name, fn):
        def wrapped(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                total[name] += (time.perf_counter() - t0) * 1e3
        return wrapped

    targets = [(scope.Region, n) for n in ("__enter__", "_cuda_unavailable", "_arm", "__exit__",
                                           "_disarm", "_finalize", "_judge")]
    targets += [(registry, "resolve"), (torch.cuda, "is_available"), (torch.cuda, "init")]
    targets += [(HUB, n) for n in ("acquire", "_take", "_subscribe", "_switch", "release",
                                   "_first_region", "_last_region", "flush")]
    targets += [(HUB.backward, "install"), (HUB.backward, "restore"), (HUB.lib.lib, "cuptiSubscribe"),
                (HUB.lib.lib, "cuptiUnsubscribe")]
    targets += [(cuda_mod, n) for n in ("pointer_kinds", "combine_by_pointer", "combine")]
    saved = []
    for owner, name in targets:
        had = name in vars(owner) if isinstance(owner, type) or hasattr(owner, "__dict__") else True
        original = getattr(owner, name)
        saved.append((owner, name, original, had))
        label = f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"
        setattr(owner, name, clocked(label, original))
    try:
        for _ in range(reps):
            timed(work, lambda: syncguard.audit(("cuda",)), st)
    finally:
        for owner, name, original, had in reversed(saved):
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
    return {k: round(v / reps, 4) for k, v in total.items()}


def cprofile_merges(st, out: str) -> None:
    """Where the cuda detector's time goes on 100 merges (issue 12: about 50 us per copy on the
    H200 against about 4 us in the CPU callback benchmark, reports/cpu/callback-cost.md, with the
    Python callback of that time). The
    callbacks run on the thread that made the CUDA call, so cProfile sees them; the region's
    entry and exit are inside the profile too."""
    import cProfile
    import io
    import pstats

    cm = cuda_with("pointer", "cprofile")
    for _ in range(3):  # warm-up: compiled paths, caches, the first subscription
        timed(merge_loop, cm, st)
    pr = cProfile.Profile()
    torch.cuda.synchronize()
    pr.enable()
    for _ in range(5):
        with cm():
            merge_loop(st)
            torch.cuda.synchronize()
    pr.disable()
    buf = io.StringIO()
    stats = pstats.Stats(pr, stream=buf)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(40)
    path = os.path.join(out, f"overhead-cprofile-{torch.__version__.split('+')[0]}.txt")
    _write(path, f"# 5 x (audit(cuda) around 100 merges), torch {torch.__version__}\n" + buf.getvalue())
    print(buf.getvalue()[:4000])


def after_each(times: dict, orders: list, name: str, scale: float = 1e3) -> dict:
    """``name``'s median ms grouped by the configuration that ran just before it in its round (the
    first of a round is left out): what one configuration leaves behind for the next shows here.
    ``times``: configuration -> seconds per round (both phases), or any per-round value with
    ``scale=1`` (a ratio); ``orders``: each round's order."""
    by: dict = collections.defaultdict(list)
    runs = iter(times[name])  # one per round that ran `name`, in order
    for order in orders:
        if name in order:
            t, i = next(runs), order.index(name)
            if i:
                by[order[i - 1]].append(t)
    return {k: round(statistics.median(v) * scale, 3) for k, v in sorted(by.items())}


def loop_state() -> dict:
    """What the workloads' loops run on: a small tensor for the tiny kernels and the merges'."""
    return {"y": torch.zeros(16, device="cuda"), **merge_state()}


def workloads() -> tuple:
    """(name, loop) of the three workloads, in the order every table lists them."""
    return (("2000 tiny kernels", tiny_loop), ("100 merges", merge_loop),
            ("transformer training step", train_step()))


#: the raw CUPTI rows, in the design's order: (name, callback, ids) as cupti_raw takes them
RAW_CUPTI = (("cupti: subscribed, no id enabled", "c", "none"),
             ("cupti: detector's ids, C no-op callback", "c", "detector"),
             ("cupti: detector's ids, Python no-op callback", "py", "detector"))


def phase_one() -> dict:
    """The configurations timed before any profiler (name -> context-manager factory), in the
    order the design indexes them: bare first, the default among them."""
    return {
        "bare": bare,
        "bare (A/A control)": bare,
        **{name: cupti_raw(callback, ids, name) for name, callback, ids in RAW_CUPTI},
        DEFAULT: cuda_with("pointer", DEFAULT),
        "audit(cuda) pointer, Python callback": cuda_with("pointer", "audit(cuda) pointer, Python callback",
                                                          "python"),
        "audit(cuda) activity": cuda_with("activity", "audit(cuda) activity"),
        "audit(debug,trace) fallback": lambda: syncguard.audit(("debug", "trace")),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rounds", type=int, default=11, help="rounds of the configurations timed "
                    "before any profiler (bare, raw CUPTI, the detectors)")
    ap.add_argument("--profiler-rounds", type=int, default=None,
                    help="rounds of the profiler configurations (default: --rounds); each round "
                         "of those costs ~25x the bare loop")
    ap.add_argument("--cprofile", action="store_true",
                    help="instead of the timings: cProfile 100 merges under audit(cuda) and write "
                         "where the Python time goes (OUT/overhead-cprofile-<torch>.txt)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)  # before any timing: a run's results need somewhere to go
    st = loop_state()
    if a.cprofile:
        return cprofile_merges(st, a.out)
    # Phase 1: no profiler has run yet, so the cuda detector can subscribe.
    before = phase_one()
    # Phase 2: profiler configurations (after them CUPTI stays held by Kineto).
    after = {
        "bare (again)": bare,
        "profiler cpu+cuda, stacks": prof([ProfilerActivity.CPU, ProfilerActivity.CUDA], True),
        "audit(debug,trace,profile)": lambda: syncguard.audit(("debug", "trace", "profile")),
    }
    loops = workloads()
    try:  # before any profiler configuration takes CUPTI; a failure must not lose the timings
        pieces = region_pieces()
        breakdown = {w: region_breakdown(work, st) for w, work in (("100 merges", merge_loop),
                                                                    ("2000 tiny kernels", tiny_loop))}
    except Exception as e:
        pieces, breakdown = {f"failed: {e!r}": 0}, {}
    results = {w: {} for w, _ in loops}
    calls = {}
    exits = {}
    a.rounds = whole_cycles(a.rounds, len(before))
    profiler_rounds = whole_cycles(a.profiler_rounds or a.rounds, len(after))
    orders: dict = {}  # workload -> the configurations' order, round by round (both phases)
    for configs, rounds in ((before, a.rounds), (after, profiler_rounds)):
        for wname, work in loops:
            if configs is before:
                EXIT_MS.clear()
                ENTER_MS.clear()
            for cm in configs.values():  # warm-up of every path
                timed(work, cm, st)
            times = {k: [] for k in configs}
            for r in range(rounds):
                order = round_order(configs, r)
                orders.setdefault(wname, []).append([k for k, _ in order])
                for k, cm in order:
                    times[k].append(timed(work, cm, st))
            results[wname].update(times)
            base = statistics.median(times[next(iter(configs))])
            print(f"{wname}: " + "; ".join(f"{k} {statistics.median(v) / base:.3f}x"
                                           for k, v in times.items()), flush=True)
            if configs is before:
                # the last `rounds` entries are the timed rounds' (the first is the warm-up's)
                exits[wname] = {k: (ENTER_MS[k][-a.rounds:], v[-a.rounds:]) for k, v in EXIT_MS.items()}
                try:  # untimed, after the timings (printed above); before any profiler holds CUPTI
                    calls[wname] = apis_called(work, st)
                except Exception as e:  # a census failure must not lose the timings
                    calls[wname] = {"apis": {f"census failed: {e!r}": 0}, "detector_callbacks": {}}
                print(f"{wname}: APIs per call {calls[wname]}", flush=True)
    table = {}
    for wname, times in results.items():
        table[wname] = {}
        for k, v in times.items():
            # the bare loop of the same phase (the profiler phase has its own bare runs)
            bare_rounds = times["bare" if k in before else "bare (again)"]
            base, best = statistics.median(bare_rounds), min(bare_rounds)
            # the configuration against the bare loop of the same round (adjacent in time, so
            # slow drift of the shared host cancels): median and quartiles over rounds
            paired = [x / b for x, b in zip(v, bare_rounds)]
            q1, _, q3 = statistics.quantiles(paired, n=4) if len(paired) > 1 else (paired * 3)
            table[wname][k] = {
                "median_ms": round(statistics.median(v) * 1e3, 3),
                "ratio": round(statistics.median(paired), 3),
                "ratio_q1": round(q1, 3), "ratio_q3": round(q3, 3),
                "ratio_of_medians": round(statistics.median(v) / base, 3),
                "best_ms": round(min(v) * 1e3, 3), "ratio_best": round(min(v) / best, 3),
                "spread_ms": round((max(v) - min(v)) * 1e3, 3)}
        for k, (enter, leave) in exits[wname].items():
            cell = table[wname][k]
            cell["enter_ms"] = round(statistics.median(enter), 3)
            cell["exit_ms"] = round(statistics.median(leave), 3)
            # the same rounds without the region's entry and exit: what the detector costs per
            # call inside a region that is already open (a test's region spans many such loops)
            body = [(x - (e + l) / 1e3) / b for x, e, l, b in zip(times[k], enter, leave, times["bare"])]
            cell["ratio_inside"] = round(statistics.median(body), 3)
    ver = torch.__version__.split("+")[0]
    from syncguard.detectors.cuda.detector import HUB

    doc = {"schema_version": 1, "kind": "syncguard-bench-overhead", "torch": torch.__version__,
           "callback": HUB.callback,
           "gpu": torch.cuda.get_device_name(0), "rounds": a.rounds,
           "profiler_rounds": profiler_rounds,
           "order": "Williams design (bench/design.py): positions and predecessors balanced per cycle",
           "results": table,
           "bare_after_ms": {w: after_each(results[w], orders[w], "bare") for w in results},
           # the default's per-round ratio by the configuration just before it; a round is one
           # fixed row of the design, so this also groups the predecessor of the same round's
           # bare loop (reports/probes/cuda-detector.md, last section, splits the two)
           "default_ratio_after": {w: after_each(
               {DEFAULT: [x / b for x, b in zip(results[w][DEFAULT], results[w]["bare"])]},
               orders[w], DEFAULT, scale=1) for w in results if DEFAULT in results[w]},
           "rounds_enter_exit_ms": {w: {k: [[round(x, 4) for x in e], [round(x, 4) for x in l]]
                                        for k, (e, l) in t.items()} for w, t in exits.items()},
           "calls_per_workload_call": calls,
           "rounds_ms": {w: {k: [round(x * 1e3, 4) for x in v] for k, v in t.items()}
                         for w, t in results.items()},
           "round_orders": orders, "region_pieces_ms": pieces, "region_breakdown_ms": breakdown}
    # written now, whole, before the markdown is built from it: nothing timed is lost to a later
    # failure
    _write(os.path.join(a.out, f"overhead-{ver}.json"), json.dumps(doc, indent=1))
    md = [f"# Audit overhead · {doc['gpu']} · torch {torch.__version__} · median of {a.rounds} "
          f"interleaved rounds ({doc['profiler_rounds']} for the profiler rows, which are against "
          "`bare (again)`)", "",
          "Rounds follow a Williams design (`bench/design.py`): per cycle of its rows, each "
          "configuration runs at each position and right after each other one equally often. "
          "`× bare, per round`: each configuration's time over the bare loop of the same round. "
          "`bare (A/A control)` is the bare loop again: its ratio is the design's and the host's "
          "alone.", "", f"`audit(cuda)` rows without a named callback: {HUB.callback}.", ""]
    for wname, rows in table.items():
        md += [f"## {wname}", "", "| configuration | median ms | × bare, per round: median "
               "[quartiles] | × bare (medians) | best ms | × bare (bests) | spread (max-min) ms "
               "| of which entering the region, ms | of which leaving it, ms "
               "| × bare without entry and exit, per round |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        md += [f"| {k} | {v['median_ms']} | {v['ratio']} [{v['ratio_q1']}, {v['ratio_q3']}] "
               f"| {v['ratio_of_medians']} | {v['best_ms']} | {v['ratio_best']} "
               f"| {v['spread_ms']} | {v.get('enter_ms', '')} | {v.get('exit_ms', '')} "
               f"| {v.get('ratio_inside', '')} |" for k, v in rows.items()]
        md += ["", "The bare loop's median ms by the configuration just before it in the round "
               "(carry-over; a round's first run is left out): " + "; ".join(
                   f"{k} {v}" for k, v in doc["bare_after_ms"][wname].items())]
        if wname in doc["default_ratio_after"]:
            md += ["", f"`{DEFAULT}`'s × bare per round, median by the configuration just before "
                   "it: " + "; ".join(f"{k} {v}" for k, v in doc["default_ratio_after"][wname].items())]
        c = calls[wname]
        md += ["", "CUDA APIs one call made (whole runtime+driver domains, untimed): "
               + (", ".join(f"{k} ×{n}" for k, n in c["apis"].items()) or "none"),
               "", "of which the detector's ids fired: "
               + (", ".join(f"{k} ×{n}" for k, n in c["detector_callbacks"].items()) or "none")]
        if "region" in c:
            r = c["region"]
            md += ["", f"One `audit(cuda)` region around one call ({r['callback']}) held "
                   f"{r['observations']} observation(s) at its exit, {r['carrying their stream sync']} "
                   f"of them a copy carrying the stream sync that completed it"
                   + (f" and {r['pairs folded']} earlier such pair(s) folded in" if r.get("pairs folded")
                      else "") + f"; {r['events']} event(s)"
                   + (f". Its calls' ENTERs: {r['ENTERs that took the GIL']} took the GIL, "
                      f"{r['repeats kept without the GIL']} were repeats kept without it"
                      if "ENTERs that took the GIL" in r else "")]
        md.append("")
    md += ["## A cuda region's entry and exit, piece by piece", "",
           "Each step the hub takes, timed alone outside any region (median of 41, ms):", "",
           "| step | ms |", "|---|---|"] + [f"| {k} | {v} |" for k, v in pieces.items()] + [""]
    md += ["Inside real regions around the workload (each function clocked where it runs; ms per "
           "region; nested calls are inside their callers' figures):", "",
           "| function | " + " | ".join(breakdown) + " |", "|---|" + "---|" * len(breakdown)]
    names = list(dict.fromkeys(k for b in breakdown.values() for k in b))
    md += [f"| {n} | " + " | ".join(str(b.get(n, "")) for b in breakdown.values()) + " |" for n in names]
    md.append("")
    emit(md, os.path.join(a.out, f"overhead-{ver}.md"))


if __name__ == "__main__":
    main()
