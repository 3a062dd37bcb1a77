"""Run the GPU snippet corpus with each detector and write the evidence table.

    python tools/corpus_report.py --out DIR

Writes DIR/corpus-<torch>.json (per snippet: expected kinds/line, what each detector reported)
and DIR/corpus-<torch>.md, plus DIR/trace-records-<torch>.json: the raw profiler records per
snippet, which the CPU tests replay to check classification without a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import syncguard  # noqa: E402
from syncguard.detect import HUBS  # noqa: E402
from tests.gpu.corpus import SNIPPETS, state  # noqa: E402


def run(snip, st, detectors):
    torch.cuda.synchronize()
    with syncguard.audit(detectors) as r:
        snip.fn(st)
    return [{"kind": e.kind, "api": e.api, "op": e.op, "line": e.lineno,
             "file": os.path.basename(e.filename or "?"), "detectors": list(e.detectors),
             "host_blocked_us": e.host_blocked_us} for e in r.syncs], r.notes


def records(snip, st):
    torch.cuda.synchronize()
    HUBS.profile.start()
    HUBS.profile.push("syncguard::region#0")
    try:
        snip.fn(st)
    finally:
        HUBS.profile.pop("syncguard::region#0")
        recs = HUBS.profile.harvest(keep=False)
    return [r.to_dict() for r in recs]


def verdict(snip, rows, version, line):
    kinds = {r["kind"] for r in rows}
    expect = snip.expected(version)
    if not expect:
        return "ok" if not rows else "FALSE POSITIVE"
    if kinds != set(expect):
        return "WRONG KIND" if rows else "MISSED"
    if line is None:
        return "ok (line not recorded)"
    return "ok" if all(r["line"] == line for r in rows) else "WRONG LINE"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rejudge", metavar="CORPUS_JSON",
                    help="no GPU: recompute verdicts of a recorded run and rewrite its files")
    a = ap.parse_args()
    if a.rejudge:
        with open(a.rejudge) as f:
            doc = rejudge(json.load(f))
        with open(a.rejudge, "w") as f:
            json.dump(doc, f, indent=1)
        write_markdown(doc, os.path.dirname(a.rejudge) or ".")
        return
    st = state()
    for snip in SNIPPETS:
        snip.fn(st)
    torch.cuda.synchronize()
    ver = torch.__version__.split("+")[0]
    table, raw = [], {}
    for snip in SNIPPETS:
        row = {"snippet": snip.name, "expect": list(snip.expected(torch.__version__)),
               "line": snip.sync_line}
        for label, dets in (("debug", ("debug",)), ("trace", ("trace",)), ("profile", ("profile",)),
                            ("both", ("debug", "trace")), ("all", ("debug", "trace", "profile"))):
            row[label], notes = run(snip, st, dets)
            if notes:
                row[f"{label}_notes"] = notes
        row["result"] = verdict(snip, row["both"], torch.__version__, snip.sync_line)
        row["result_all"] = verdict(snip, row["all"], torch.__version__, snip.sync_line)
        table.append(row)
        raw[snip.name] = records(snip, st)
    from syncguard.sessionfile import environment

    doc = {"schema_version": 1, "kind": "syncguard-corpus", "environment": environment(),
           "snippets": table}
    with open(os.path.join(a.out, f"corpus-{ver}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(a.out, f"trace-records-{ver}.json"), "w") as f:
        json.dump({"schema_version": 1, "torch": torch.__version__, "records": raw}, f)
    write_markdown(doc, a.out)


def rejudge(doc):
    """Verdicts again from recorded rows, with the corpus's current expectations."""
    by_name = {s.name: s for s in SNIPPETS}
    version = doc["environment"]["torch"]
    for row in doc["snippets"]:
        snip = by_name[row["snippet"]]
        row["expect"] = list(snip.expected(version))
        row["result"] = verdict(snip, row["both"], version, row["line"])
        row["result_all"] = verdict(snip, row["all"], version, row["line"])
    return doc


def write_markdown(doc, out):
    env, table = doc["environment"], doc["snippets"]
    ver = env["torch"].split("+")[0]

    def cell(rows):
        return ", ".join(sorted({r["kind"] for r in rows})) or "clean"

    md = [f"# Snippet corpus on {env.get('gpu')} · torch {env['torch']}", "",
          "Detectors: `debug` = sync-debug mode, `trace` = CUDA trace callbacks + API hooks, "
          "`profile` = PyTorch profiler runtime trace (opt-in). `both` = debug+trace, the default.", "",
          "| snippet | expected | debug | trace | profile | both (default) | line ok | result | ops (all three) | all three |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        exp = ", ".join(row["expect"]) or "clean"
        line_ok = all(r["line"] == row["line"] for r in row["both"]) if row["both"] and row["line"] else "–"
        ops = ", ".join(sorted({r["op"] for r in row["all"] if r["op"]})) or "–"
        md.append(f"| `{row['snippet']}` | {exp} | {cell(row['debug'])} | {cell(row['trace'])} | "
                  f"{cell(row['profile'])} | {cell(row['both'])} | {line_ok} | {row['result']} | "
                  f"{ops} | {row['result_all']} |")
    bad = [r["snippet"] for r in table
           if not r["result"].startswith("ok") or not r["result_all"].startswith("ok")]
    md += ["", f"{len(table) - len(bad)}/{len(table)} snippets as expected" +
           (f"; not: {', '.join(bad)}" if bad else "")]
    with open(os.path.join(out, f"corpus-{ver}.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
