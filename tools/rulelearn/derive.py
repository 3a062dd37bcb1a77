"""Learn the rules table from committed GPU runs, and check it against them.

The runs are ``reports/atlas-runs/corpus-run-<torch>.json`` (tools/corpus_report.py, schema
"syncguard-corpus-run" 2): per snippet of the corpus, the library corpus and the cases corpus
(merge variants with and without deterministic mode, CPU-path batching), its call line and the
**ground truth** measured in the same run: the profiler's CUDA runtime trace plus sync-debug
mode (``truth.waits``: kind, api, op). syncguard's own detectors' verdicts in those files are
never read here: the rules must not inherit a detector's mistakes.

How a rule is learned: each snippet runs on the CPU under prediction with an empty table (its
set-up and context outside, as the GPU runner does), which records every call that touched the
device and its facts. A call belongs to the snippet's call when the snippet's line is the
call's line or on its stack (a merge variant's ops are in cases/merge.py, called from the
snippet's line). A measured wait is attributed to the recorded calls with the same op name
(shared out in order when there are as many, else to the last), else to the last of them that
is not a plain device kernel (the measured op is then an inner op of it, e.g. ``aten::nonzero``
inside ``aten::index.Tensor``), else to the last. Every other recorded call is measured clean.
The same key measured differently in one torch's runs is a conflict: the facts are not enough,
and the check fails rather than pick one.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from syncguard.predict.predictor import Observation
from syncguard.predict.rules import RuleTable, fact_key, version_tuple

__all__ = ["CorpusRun", "Ran", "Derivation", "RUNS_DIR", "CAPTURE_WHY", "load_runs",
           "run_snippets", "observe", "derive", "normalise_op", "measured_events", "measured_kinds", "at_call"]

#: where the committed GPU runs the table is learned from live (relative to the project root)
RUNS_DIR = os.path.join("reports", "atlas-runs")
RUN_SCHEMA = "syncguard-corpus-run"

_BUILTIN = [
    (re.compile(r"synchronize of (torch\.cuda\.)?Stream"), "torch.cuda.Stream.synchronize"),
    (re.compile(r"synchronize of (torch\.cuda\.)?Event"), "torch.cuda.Event.synchronize"),
    (re.compile(r"_cuda_synchronize"), "torch.cuda.synchronize"),
    (re.compile(r"_cuda_emptyCache"), "torch.cuda.empty_cache"),
]


def normalise_op(op: str | None) -> str | None:
    """The profiler's name of a Python-level sync (``<built-in method synchronize of Stream
    object at 0x..>``) in the predictor's spelling; aten names pass through."""
    if op is None:
        return None
    for pattern, name in _BUILTIN:
        if pattern.search(op):
            return name
    return op


@dataclass(frozen=True)
class CorpusRun:
    path: str  # relative to the project root
    torch: str  # short version, e.g. "2.8.0"
    environment: dict  # the run's provenance
    snippets: dict  # snippet id ("corpus/item", "library/...", "cases/...") -> its record

    def has(self, corpus: str) -> bool:
        return any(k.startswith(corpus + "/") for k in self.snippets)


def load_runs(root: str) -> list[CorpusRun]:
    """Every committed ``reports/atlas-runs/corpus-run-<v>.json``, oldest torch first."""
    runs = []
    folder = os.path.join(root, RUNS_DIR)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not (name.startswith("corpus-run-") and name.endswith(".json")):
            continue
        path = os.path.join(folder, name)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("schema") != RUN_SCHEMA or data.get("schema_version") != 2:
            raise ValueError(f"{path} is not a {RUN_SCHEMA} run of schema_version 2")
        env = data.get("provenance", {})
        short = ".".join(str(x) for x in version_tuple(env.get("torch") or name[11:-5]))
        runs.append(CorpusRun(os.path.relpath(path, root), short, env,
                              {s["id"]: s for s in data.get("snippets", [])}))
    return sorted(runs, key=lambda r: version_tuple(r.torch))


def measured_events(record: dict) -> list[dict] | None:
    """The snippet's waits as the run's ground truth measured them, each at the snippet's call
    line (the trace does not say which line of the call waited); None when the run could not measure the snippet (it raised, or the trace failed)."""
    truth = record.get("truth") or {}
    if record.get("error") or not truth.get("ok"):
        return None
    # the trace names a blocking copy "cudaMemcpyAsync+cudaStreamSynchronize"; a predicted
    # event names the call that waits, as syncguard's detectors (and allow()/declared syncs) do
    return [{"kind": w["kind"], "api": w["api"].split("+")[-1], "op": normalise_op(w.get("op")),
             "line": record.get("line")} for w in truth.get("waits", [])]


def measured_kinds(root: str, torch_version: str, snippet_id: str) -> list[str]:
    """The kinds (sorted) the committed run of ``torch_version`` measured for one snippet: the
    expected values of tests, read from the GPU's ground truth, never from the predictor."""
    run = {r.torch: r for r in load_runs(root)}[torch_version]
    events = measured_events(run.snippets[snippet_id])
    if events is None:
        raise ValueError(f"{run.path} could not measure {snippet_id}")
    return sorted(e["kind"] for e in events)


def at_call(filename: str | None, lineno: int | None, stack: Iterable, snip: dict) -> bool:
    """Whether a call recorded at ``filename:lineno`` (with ``stack`` above it) was made by the
    snippet's own line ``snip['file']:snip['line']``."""
    want = f"{snip['file']}:{snip['line']}"
    if filename and lineno == snip["line"] and filename.endswith(snip["file"]):
        return True
    return any(str(entry).split(" in ", 1)[0].endswith(want) for entry in stack)


@dataclass
class Ran:
    """One snippet run under prediction: its calls, predicted syncs and what was not modelled."""

    calls: list = field(default_factory=list)  # Observation
    syncs: list = field(default_factory=list)  # SyncEvent
    unmodelled: list = field(default_factory=list)  # Unmodelled
    crashed: str | None = None


#: why a snippet marked ``capture`` is not run under prediction
CAPTURE_WHY = "CUDA graph capture/replay: a CPU build has no graphs to capture or replay"


def run_snippets(snippets: list[dict], make_states: Callable[[], dict], table: RuleTable,
                 target: str | None = None) -> dict[str, Ran]:
    """Run each snippet (the runner's shape: tools/corpus_report.py ``cases()``) under
    prediction, set-up and context outside what is recorded, as the GPU runner does. One bad
    snippet is recorded and the others go on."""
    from syncguard.predict import predicting
    from syncguard.predict.predictor import Unmodelled

    out: dict[str, Ran] = {}
    with predicting(target, rules=table) as p:
        states = make_states()
        for snip in snippets:
            ran = out[snip["id"]] = Ran()
            if snip.get("capture"):
                ran.unmodelled.append(Unmodelled(snip["name"], CAPTURE_WHY, snip["file"],
                                                 snip["line"]))
                continue
            st = states.get(snip["corpus"])
            try:
                if isinstance(st, Exception):
                    raise RuntimeError(f"state of corpus {snip['corpus']} failed: {st!r}")
                with snip["context"]() if snip.get("context") else contextlib.nullcontext():
                    if snip.get("setup"):
                        snip["setup"](st)
                    c0, s0, u0 = len(p.observations), len(p.syncs), len(p.unmodelled)
                    try:
                        snip["fn"](st)
                    finally:
                        ran.calls = p.observations[c0:]
                        ran.syncs = p.syncs[s0:]
                        ran.unmodelled = p.unmodelled[u0:]
            except Exception as e:  # noqa: BLE001 - one bad snippet must not stop the others
                ran.crashed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return out


def _base(op: str | None) -> str:
    return (op or "").split("::")[-1].split(".")[0].strip("_")


class _Mismatch(Exception):
    """The snippet's measured waits cannot be matched to the CPU's calls one to one."""


def _attribute(measured: list[dict], at_line: list[Observation]) -> dict[int, list[dict]]:
    """Measured syncs -> index (in ``at_line``) of the recorded call that made them: the calls
    of the same op (shared out in order when there are as many), else a call whose name holds
    the measured op's (``_to_copy`` for ``copy_``), else the last call not already given a
    sync that is not a plain device kernel, else the last call."""
    out: dict[int, list[dict]] = {}
    by_op: dict[str | None, list[dict]] = {}
    for m in measured:
        by_op.setdefault(m["op"], []).append(m)
    picks: list[tuple[int, dict]] = []
    later = []
    for op, ms in by_op.items():
        exact = [i for i, o in enumerate(at_line) if op and o.op.split(".")[0] == op]
        if exact and len(ms) % len(exact) == 0:  # as many (or k times as many) as the calls
            per = len(ms) // len(exact)
            picks += [(exact[j // per], m) for j, m in enumerate(ms)]
        elif exact:  # this torch's code made another number of such calls than the CPU's
            raise _Mismatch(f"{len(ms)} measured wait(s) via {op}, {len(exact)} such call(s) "
                            "under prediction: the CPU's torch runs other library code")
        else:
            later.append((op, ms))
    taken = {i for i, _ in picks}
    rest = []
    for op, ms in later:  # by name first, so a fallback never takes a call named for another
        near = [i for i, o in enumerate(at_line) if op and i not in taken
                and _base(op) and _base(op) in _base(o.op)]
        if near:
            taken.add(near[-1])
            picks += [(near[-1], m) for m in ms]
        else:
            rest.append(ms)
    for ms in rest:
        host = [i for i, o in enumerate(at_line) if not o.device_kernel and i not in taken]
        pick = host[-1] if host else len(at_line) - 1
        taken.add(pick)
        picks += [(pick, m) for m in ms]
    for pick, m in picks:
        if pick >= 0:
            out.setdefault(pick, []).append({"kind": m["kind"], "api": m["api"], "via": m["op"]})
    return out


@dataclass
class Derivation:
    table: RuleTable
    conflicts: list[str] = field(default_factory=list)
    unattributed: list[str] = field(default_factory=list)


def derive(runs: list[CorpusRun], snippets: list[dict], calls: dict[str, list[Observation]]
           ) -> Derivation:
    """Rules from every run, for every snippet it measured and the CPU could run."""
    d = Derivation(RuleTable())
    d.table.sources.extend({"path": r.path, "torch": r.environment.get("torch"),
                            "gpu": r.environment.get("gpu"),
                            "driver": r.environment.get("driver"),
                            "commit": r.environment.get("git_commit"),
                            "truth": r.environment.get("truth_source", "runtime trace + "
                                                       "sync-debug mode, same run")}
                           for r in runs)
    for run in runs:
        clean, synced = set(), set()
        for snip in snippets:
            record = run.snippets.get(snip["id"])
            measured = measured_events(record) if record else None
            if measured is None or snip["id"] not in calls:
                continue
            obs = calls[snip["id"]]
            at_line = [o for o in obs if at_call(o.filename, o.lineno, o.stack, snip)]
            try:
                syncs = _attribute(measured, at_line) if measured else {}
            except _Mismatch as e:
                d.table.not_learned.append(f"{os.path.basename(run.path)}#{snip['id']}: {e}")
                continue
            if measured and not at_line:
                d.unattributed.append(f"{run.path}#{snip['id']}: no recorded call at "
                                      f"{snip['file']}:{snip['line']}")
            for o in obs:
                i = at_line.index(o) if o in at_line else -1
                found = sorted(syncs.get(i, []), key=lambda s: (s["kind"], s["api"], s["via"] or ""))
                key = fact_key(o.op, dict(o.facts))
                _add(d, key, o, run, snip["id"], found)
                if o.device_kernel:
                    (synced if found else clean).add(key)
        if clean:
            # the class answers for device kernels no run measured; its exceptions (device
            # kernels that did sync, e.g. a solver's info check) are rules of their own
            d.table.classes.setdefault("device_kernel", {"torch": {}})["torch"][run.torch] = {
                "syncs": [], "evidence": sorted(clean - synced),
                "exceptions": sorted(synced)}
    return d


def _add(d: Derivation, key: str, o: Observation, run: CorpusRun, snippet: str,
         syncs: list[dict]) -> None:
    rule = d.table.rules.setdefault(key, {"op": o.op, "facts": dict(o.facts), "torch": {}})
    entry = rule["torch"].get(run.torch)
    where = f"{os.path.basename(run.path)}#{snippet}"
    if entry is None:
        rule["torch"][run.torch] = {"syncs": syncs, "evidence": [where]}
    elif entry["syncs"] != syncs:
        d.conflicts.append(f"{run.torch}: {key} is {entry['syncs']} in {entry['evidence'][:3]} "
                           f"but {syncs} in {where}")
    elif where not in entry["evidence"]:
        entry["evidence"].append(where)


def observe(snippets: list[dict], make_states: Callable[[], dict]) -> tuple[dict, dict]:
    """Each snippet's recorded calls with an empty table, and the snippets that raised."""
    ran = run_snippets(snippets, make_states, RuleTable())
    skipped = {s["id"] for s in snippets if s.get("capture")}  # not run: nothing to learn
    return ({k: r.calls for k, r in ran.items() if not r.crashed and k not in skipped},
            {k: r.crashed for k, r in ran.items() if r.crashed})

