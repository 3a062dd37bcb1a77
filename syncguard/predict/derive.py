"""Learn the rules table from committed GPU runs, and check it against them.

How a rule is learned: each corpus snippet runs on the CPU under prediction with an empty
table, which records every call that touched the device and its facts (nothing is predicted).
Each committed GPU run says what that snippet did on a real GPU: the syncs, their kinds, the
CUDA API and (with the profile detector) the aten op. A measured sync is attributed to the
recorded call at the snippet's ``# SYNC`` line with the same op name, else to the last call
there that is not a plain device kernel (the measured op is then an inner op of it, e.g.
``aten::nonzero`` inside ``aten::index.Tensor``). Every other recorded call is measured clean.
Two runs of one torch disagreeing on a key is a conflict: the facts are not enough, and the
check fails rather than pick one.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .engine import Observation
from .rules import RuleTable, fact_key, version_tuple

__all__ = ["CorpusRun", "load_corpus_runs", "observe_snippets", "derive", "normalise_op",
           "measured_events"]

_BUILTIN = [
    (re.compile(r"synchronize of (torch\.cuda\.)?Stream"), "torch.cuda.Stream.synchronize"),
    (re.compile(r"synchronize of (torch\.cuda\.)?Event"), "torch.cuda.Event.synchronize"),
    (re.compile(r"_cuda_synchronize"), "torch.cuda.synchronize"),
    (re.compile(r"_cuda_emptyCache"), "torch.cuda.empty_cache"),
]


def normalise_op(op: str | None) -> str | None:
    """The profiler's name of a Python-level sync (``<built-in method synchronize of Stream
    object at 0x..>`` on 2.14.1) in the predictor's spelling; aten names pass through."""
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
    environment: dict
    snippets: dict  # name -> the run's record of that snippet


def load_corpus_runs(root: str, stem: str = "corpus") -> list[CorpusRun]:
    """Every committed ``reports/gpu/<v>/<stem>-<v>.json``, oldest torch first (``stem``
    names the suite: "corpus", or the library corpus's file stem once its runs are committed)."""
    runs = []
    gpu = os.path.join(root, "reports", "gpu")
    for v in sorted(os.listdir(gpu)) if os.path.isdir(gpu) else []:
        path = os.path.join(gpu, v, f"{stem}-{v}.json")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        env = data.get("environment", {})
        short = ".".join(str(x) for x in version_tuple(env.get("torch", v)))
        runs.append(CorpusRun(os.path.relpath(path, root), short, env,
                              {s["snippet"]: s for s in data.get("snippets", [])}))
    return sorted(runs, key=lambda r: version_tuple(r.torch))


def measured_events(record: dict) -> list[dict]:
    """The snippet's syncs as measured: every detector together (exact kinds and ops) where
    the run had the profile detector, else debug+trace."""
    events = record.get("all") if record.get("all") is not None else record.get("both", [])
    return [{"kind": e["kind"], "api": e["api"], "op": normalise_op(e.get("op")),
             "line": e.get("line")} for e in events]


def observe_snippets(snippets: Iterable, state: Callable) -> tuple[dict, dict]:
    """Run each snippet under prediction with an empty table: its recorded calls, and the
    snippets that raised (name -> error)."""
    from . import predicting

    calls: dict[str, list[Observation]] = {}
    crashed: dict[str, str] = {}
    with predicting(rules=RuleTable()) as p:
        st = state()
        for snip in snippets:
            start = len(p.observations)
            try:
                snip.fn(st)
            except Exception as e:  # one bad snippet must not stop the others
                crashed[snip.name] = f"{type(e).__name__}: {e}"
            calls[snip.name] = p.observations[start:]
    return calls, crashed


def _attribute(measured: list[dict], at_line: list[Observation]) -> dict[int, list[dict]]:
    """Measured syncs -> index of the recorded call that made them."""
    out: dict[int, list[dict]] = {}
    for m in measured:
        exact = [i for i, o in enumerate(at_line) if m["op"] and o.op.split(".")[0] == m["op"]]
        host = [i for i, o in enumerate(at_line) if not o.device_kernel]
        pick = exact[-1] if exact else host[-1] if host else len(at_line) - 1
        if pick >= 0:
            out.setdefault(pick, []).append({"kind": m["kind"], "api": m["api"], "via": m["op"]})
    return out


@dataclass
class Derivation:
    table: RuleTable
    conflicts: list[str] = field(default_factory=list)
    unattributed: list[str] = field(default_factory=list)


def derive(runs: list[CorpusRun], snippets: list, calls: dict,
           into: Derivation | None = None) -> Derivation:
    """Rules from one suite's runs; pass ``into`` to add a second suite (the library corpus)
    to the same table, where a disagreement between suites is a conflict like any other."""
    d = into or Derivation(RuleTable())
    d.table.sources.extend({"path": r.path, "torch": r.environment.get("torch"),
                            "gpu": r.environment.get("gpu"),
                            "driver": r.environment.get("driver")} for r in runs)
    for run in runs:
        kernels = d.table.classes.get("device_kernel", {}).get("torch", {}).get(
            run.torch, {"syncs": [], "evidence": []})
        for snip in snippets:
            record = run.snippets.get(snip.name)
            if record is None or snip.name not in calls:
                continue
            obs = calls[snip.name]
            measured = measured_events(record)
            line = snip.sync_line
            at_line = [o for o in obs if o.lineno == line]
            syncs = _attribute(measured, at_line) if measured else {}
            if measured and not at_line:
                d.unattributed.append(f"{run.path}#{snip.name}: no recorded call at line {line}")
            for o in obs:
                i = at_line.index(o) if o in at_line else -1
                found = sorted(syncs.get(i, []), key=lambda s: (s["kind"], s["api"], s["via"] or ""))
                _add(d, fact_key(o.op, dict(o.facts)), o, run, snip.name, found)
                if o.device_kernel:
                    key = fact_key(o.op, dict(o.facts))
                    if found:
                        d.conflicts.append(f"{run.torch}: device kernel {key} synced in "
                                           f"{snip.name}")
                    elif key not in kernels["evidence"]:
                        kernels["evidence"].append(key)
        if kernels["evidence"]:
            kernels["evidence"].sort()
            d.table.classes.setdefault("device_kernel", {"torch": {}})["torch"][run.torch] = kernels
    return d


def _add(d: Derivation, key: str, o: Observation, run: CorpusRun, snippet: str,
         syncs: list[dict]) -> None:
    rule = d.table.rules.setdefault(key, {"op": o.op, "facts": dict(o.facts), "torch": {}})
    entry = rule["torch"].get(run.torch)
    where = f"{os.path.basename(run.path)}#{snippet}"
    if entry is None:
        rule["torch"][run.torch] = {"syncs": syncs, "evidence": [where]}
    elif entry["syncs"] != syncs:
        d.conflicts.append(f"{run.torch}: {key} is {entry['syncs']} in {entry['evidence']} but "
                           f"{syncs} in {where}")
    elif where not in entry["evidence"]:
        entry["evidence"].append(where)
