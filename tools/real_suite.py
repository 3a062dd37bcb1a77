"""An open-source project's own GPU test suite, bare vs ``pytest --syncguard``, in one run.

  python tools/real_suite.py run SUITE_DIR OUT ROUNDS -- PYTEST_ARGS...
      Runs ``python -m pytest PYTEST_ARGS`` in SUITE_DIR, ROUNDS times bare and ROUNDS times with
      ``--syncguard`` (record mode, the default scope), interleaved (bare, syncguard, bare, ...),
      each in a process of its own measured from outside: wall time, peak RSS of its largest
      process (xdist workers included), exit code, JUnit outcomes. Writes OUT/real-suite.json and
      each round's log, JUnit XML and syncguard report.
  python tools/real_suite.py summarize OUT [--md FILE]
      The comparison: outcomes (must be identical), wall time and peak RSS (median of rounds,
      ratio), report size, and the top 10 in-scope sync sites. Reads what ``run`` wrote.

  python tools/real_suite.py recheck SUITE_DIR OUT TIMES -- PYTEST_OPTIONS...
      The tests whose outcome differed under syncguard in ``run`` (not syncguard's own verdicts),
      alone, TIMES times bare and TIMES times with ``--syncguard`` (record mode), interleaved:
      does the difference reproduce, or is the test flaky either way? PYTEST_OPTIONS are the
      options without test paths (the test ids are added). Writes OUT/recheck.json; ``summarize``
      then shows it.

Why from outside: the numbers must include what syncguard costs the whole pytest process
(plugin load, report writing), not only what a region sees.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def _read(out: Path, name: str) -> bytes:
    """A file ``run`` wrote, or its committed ``.gz`` (large logs are kept compressed)."""
    plain = out / name
    return plain.read_bytes() if plain.exists() else gzip.decompress((out / (name + ".gz")).read_bytes())


SYNCGUARD_VERDICT = "syncguard: "  # how the plugin's own failure message starts (explain.py)


def junit_outcomes(xml: bytes) -> dict[str, tuple[str, str]]:
    """nodeid-like key -> (passed/failed/error/skipped, failure message), from JUnit XML."""
    out = {}
    for case in ET.fromstring(xml).iter("testcase"):
        key = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag: child for child in case}
        outcome = ("failed" if "failure" in tags else "error" if "error" in tags
                   else "skipped" if "skipped" in tags else "passed")
        bad = tags.get("failure", tags.get("error"))
        message = (bad.get("message") or "") if bad is not None else ""
        out[key] = (outcome, message.removeprefix("Failed: "))
    return out


def measure(cmd: list[str], cwd: Path, log: Path) -> dict:
    """One pytest process, timed and measured from this (parent) process."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    # RUSAGE_CHILDREN's ru_maxrss is the largest of the waited-for descendants so far; each
    # round runs in its own `measure-one` process, so it is this round's peak alone.
    return {"rc": rc, "wall_s": round(wall, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}


def run(args) -> int:
    suite, out = Path(args.suite).resolve(), Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rounds = []
    for i in range(1, args.rounds + 1):
        for mode in ("bare", "syncguard"):
            name = f"{mode}-{i}"
            extra = [f"--junitxml={out / (name + '.xml')}"]
            if mode == "syncguard":
                extra += ["--syncguard", "--syncguard-mode=record",
                          f"--syncguard-report={out / (name + '.json')}"]
            else:
                extra += ["-p", "no:syncguard"]
            cmd = [sys.executable, "-m", "pytest", *args.pytest_args, *extra]
            # a child per round, so that its RUSAGE_CHILDREN peak is this round's alone
            one = subprocess.run([sys.executable, __file__, "measure-one", str(suite),
                                  str(out / (name + ".log")), "--", *cmd],
                                 capture_output=True, text=True)
            rec = json.loads(one.stdout.strip().splitlines()[-1])
            rec.update(mode=mode, round=i, name=name)
            rounds.append(rec)
            print(json.dumps(rec), flush=True)
    doc = {"suite": str(suite), "pytest_args": args.pytest_args, "rounds": rounds,
           "python": sys.version.split()[0]}
    try:
        import torch
        doc["torch"] = torch.__version__
        doc["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    (out / "real-suite.json").write_text(json.dumps(doc, indent=1))
    return 0


def differences(ref: dict, got: dict) -> tuple[list[str], list[str], list[str]]:
    """(changed, syncguard's verdicts, other) between two rounds' JUnit outcomes. In fail mode
    (the plugin's default) a test whose body passed but synced fails with syncguard's own
    verdict: counted apart, so "other" says whether syncguard changed anything *else*."""
    changed = sorted(k for k in ref.keys() | got.keys()
                     if ref.get(k, ("absent",))[0] != got.get(k, ("absent",))[0])
    verdicts = [k for k in changed if ref.get(k, ("",))[0] == "passed"
                and got.get(k, ("", ""))[1].startswith(SYNCGUARD_VERDICT)]
    return changed, verdicts, [k for k in changed if k not in verdicts]


def differing(out: Path) -> list[str]:
    """JUnit keys with an "other" difference from bare round 1 in some syncguard round."""
    doc = json.loads((out / "real-suite.json").read_text())
    ref = junit_outcomes(_read(out, "bare-1.xml"))
    keys: dict[str, None] = {}
    for r in doc["rounds"]:
        if r["mode"] == "syncguard":
            keys.update(dict.fromkeys(differences(ref, junit_outcomes(_read(out, f"{r['name']}.xml")))[2]))
    return list(keys)


def node_id(suite: Path, key: str) -> str:
    """JUnit ``pkg.mod.Class::test[param]`` -> pytest's ``pkg/mod.py::Class::test[param]``: the
    longest dotted prefix that is a file of the suite is the module."""
    classname, name = key.split("::", 1)
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (suite / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    raise ValueError(f"no test file of {suite} matches {key!r}")


def recheck(args) -> int:
    suite, out = Path(args.suite).resolve(), Path(args.out).resolve()
    keys = differing(out)
    ids = {k: node_id(suite, k) for k in keys}
    seen: dict[str, dict[str, list[str]]] = {k: {"bare": [], "syncguard": []} for k in keys}
    for i in range(1, args.times + 1) if keys else ():
        for mode in ("bare", "syncguard"):
            xml = out / f"recheck-{mode}-{i}.xml"
            extra = (["--syncguard", "--syncguard-mode=record"] if mode == "syncguard"
                     else ["-p", "no:syncguard"])
            with open(out / f"recheck-{mode}-{i}.log", "w") as f:
                subprocess.call([sys.executable, "-m", "pytest", *args.pytest_args, *extra,
                                 f"--junitxml={xml}", *ids.values()],
                                cwd=suite, stdout=f, stderr=subprocess.STDOUT)
            got = junit_outcomes(xml.read_bytes()) if xml.exists() else {}
            for k in keys:
                seen[k][mode].append(got.get(k, ("absent",))[0])
    (out / "recheck.json").write_text(json.dumps(
        {"times": args.times, "pytest_args": args.pytest_args,
         "tests": [{"key": k, "nodeid": ids[k], **seen[k]} for k in keys]}, indent=1))
    print(f"rechecked {len(keys)} test(s) {args.times} time(s) each way: {out / 'recheck.json'}")
    return 0


def recheck_verdict(bare: list[str], syncguard: list[str]) -> str:
    if len(set(bare)) > 1 or len(set(syncguard)) > 1:
        return "flaky (mixed outcomes within a mode)"
    if bare == syncguard:
        return "did not reproduce (same outcome both ways)"
    return "reproduces: syncguard changes the outcome"


def _recheck_lines(out: Path) -> list[str]:
    path = out / "recheck.json"
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    lines = ["", f"## Rechecked: the differing tests alone, {doc['times']} time(s) each way", "",
             "| test | bare | syncguard (record mode) | verdict |", "|---|---|---|---|"]
    for t in doc["tests"]:
        lines.append(f"| `{t['nodeid']}` | {', '.join(t['bare'])} | {', '.join(t['syncguard'])} | "
                     f"{recheck_verdict(t['bare'], t['syncguard'])} |")
    return lines if doc["tests"] else lines[:2] + ["No test differed: nothing to recheck."]


def summarize(args) -> int:
    out = Path(args.out)
    doc = json.loads((out / "real-suite.json").read_text())
    rounds = doc["rounds"]
    lines = [f"# {Path(doc['suite']).name}: its own GPU tests, bare vs `pytest --syncguard`", "",
             f"torch {doc.get('torch')}, {doc.get('gpu')}; pytest args: "
             f"`{' '.join(doc['pytest_args'])}`; rounds interleaved bare/syncguard.", ""]
    # outcomes: every round of each mode against bare round 1 (see differences)
    ref = junit_outcomes(_read(out, "bare-1.xml"))
    counts = Counter(o for o, _ in ref.values())
    lines += [f"**Tests:** {len(ref)} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}).", "",
              "| round | exit code | wall s | peak RSS MiB | outcomes differing from bare-1 | "
              "of which syncguard's own verdict (a sync in fail mode) | other differences |",
              "|---|---|---|---|---|---|---|"]
    for r in rounds:
        changed, verdicts, other = differences(ref, junit_outcomes(_read(out, f"{r['name']}.xml")))
        lines.append(f"| {r['name']} | {r['rc']} | {r['wall_s']} | {r['peak_rss_mib']} | "
                     f"{len(changed)} | {len(verdicts)} | {len(other)}"
                     f"{': ' + ', '.join(other[:5]) if other else ''} |")
    med = {m: {k: statistics.median(r[k] for r in rounds if r["mode"] == m)
               for k in ("wall_s", "peak_rss_mib")} for m in ("bare", "syncguard")}
    lines += ["", f"**Median wall time:** bare {med['bare']['wall_s']:.1f} s, syncguard "
              f"{med['syncguard']['wall_s']:.1f} s: **{med['syncguard']['wall_s'] / med['bare']['wall_s']:.2f}×**.",
              f"**Median peak RSS (largest process):** bare {med['bare']['peak_rss_mib']:.0f} MiB, "
              f"syncguard {med['syncguard']['peak_rss_mib']:.0f} MiB "
              f"({med['syncguard']['peak_rss_mib'] / med['bare']['peak_rss_mib']:.2f}×).", ""]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from syncguard.reporting.sessionfile import load_document

    report = out / "syncguard-1.json"
    report = report if report.exists() else out / "syncguard-1.json.gz"
    size = len(_read(out, "syncguard-1.json"))
    tests = list(load_document(report)["tests"])  # TestEntry objects
    root = doc["suite"].rstrip("/") + "/"

    def rel(where):
        return where.removeprefix(root) if where else where

    inside, outside = Counter(), Counter()
    what = {}
    for t in tests:
        for rec in t.syncs + t.allowed:
            key = (rel(rec.where), rec.kind, rec.op or rec.api)
            inside[key] += rec.count
            what.setdefault(key, (rec.function, rec.user_frame, set()))[2].add(t.nodeid)
        for rec in t.outside:
            outside[rel(rec.where)] += rec.count
    audited = sum(t.audited for t in tests)
    with_syncs = sum(bool(t.syncs) for t in tests)
    lines += [f"**Report:** `syncguard-1.json`, {size / 1024:.0f} KiB uncompressed for {len(tests)} tests "
              f"({audited} audited; {with_syncs} with in-scope syncs; "
              f"{sum(inside.values())} in-scope and {sum(outside.values())} outside-scope syncs).", "",
              "## Top 10 in-scope sync sites", "",
              "| site | kind | API / op | function | syncs | tests | first test's user frame |",
              "|---|---|---|---|---|---|---|"]
    for (where, kind, api), n in inside.most_common(10):
        fn, user, nodes = what[(where, kind, api)]
        lines.append(f"| `{where}` | {kind} | {api} | {fn} | {n} | {len(nodes)} | `{rel(user) or ''}` |")
    lines += ["", "## Top 5 outside-scope sites (counted, never failing)", "",
              "| site | syncs |", "|---|---|"]
    lines += [f"| `{w}` | {n} |" for w, n in outside.most_common(5)]
    lines += _recheck_lines(out)
    text = "\n".join(lines) + "\n"
    if args.md:
        Path(args.md).write_text(text)
    print(text)
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["measure-one"]:
        _, suite, log, sep, *cmd = argv
        print(json.dumps(measure(cmd, Path(suite), Path(log))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("suite")
    r.add_argument("out")
    r.add_argument("rounds", type=int)
    r.add_argument("pytest_args", nargs=argparse.REMAINDER)
    c = sub.add_parser("recheck")
    c.add_argument("suite")
    c.add_argument("out")
    c.add_argument("times", type=int)
    c.add_argument("pytest_args", nargs=argparse.REMAINDER)
    s = sub.add_parser("summarize")
    s.add_argument("out")
    s.add_argument("--md")
    a = ap.parse_args(argv)
    if a.cmd in ("run", "recheck"):
        a.pytest_args = [x for x in a.pytest_args if x != "--"]
        return run(a) if a.cmd == "run" else recheck(a)
    return summarize(a)


if __name__ == "__main__":
    sys.exit(main())
