"""Compare two syncguard session reports: outcome, audit state, the detectors that judged it,
sync sites and counts per test.

Usage: python samples/compare_reports.py A.json B.json   (exit 0 when equal, 1 when not)
Durations, workers, devices, timestamps and examples counts are ignored on purpose: a serial and a
``-n 4`` run of the same tests must agree on everything else.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from syncguard.reporting.sessionfile import load_document  # noqa: E402


def _sites(records):
    """Per-site records (schema 2) with their counts."""
    return sorted({(r.kind, r.api, r.op, os.path.basename(r.filename or "?"), r.lineno, r.count)
                   for r in records})


KEYS = ("outcome", "audit", "detectors", "syncs", "allowed", "outside")


def digest(doc):
    """Per nodeid what must agree; ``doc`` as load_document returns it (tests are TestEntry)."""
    # detectors: a worker whose region fell back (debug,trace) sees fewer syncs than cuda would
    return {t.nodeid: {"outcome": t.outcome, "audit": t.audit,
                       "detectors": sorted(t.detectors) if t.detectors is not None else None,
                       "syncs": _sites(t.syncs),
                       "allowed": _sites(t.allowed), "outside": _sites(t.outside)}
            for t in doc["tests"]}


def compare(a: dict, b: dict) -> list[str]:
    da, db = digest(a), digest(b)
    diffs = [f"only in A: {n}" for n in sorted(set(da) - set(db))]
    diffs += [f"only in B: {n}" for n in sorted(set(db) - set(da))]
    for n in sorted(set(da) & set(db)):
        for key in KEYS:
            if da[n][key] != db[n][key]:
                diffs.append(f"{n}: {key} differs: A={da[n][key]!r} B={db[n][key]!r}")
    return diffs


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    a, b = (load_document(p) for p in argv)
    diffs = compare(a, b)
    for name, doc in zip("AB", (a, b)):
        print(f"{name}: {argv['AB'.index(name)]}: complete={doc['complete']} {doc['summary']}")
    print("\n".join(diffs) if diffs else f"EQUAL: {len(a['tests'])} tests agree on outcome, audit "
          "state, detectors and sync sites")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
