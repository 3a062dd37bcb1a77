"""Derive the predictor's rules table from the committed GPU runs, or check it.

    python tools/predict_rules.py derive   # rewrite syncguard/predict/rules.json
    python tools/predict_rules.py check    # exit 1 if rules.json is stale or contradicts a run

Runs on a CPU: every snippet the GPU runner ran (tools/corpus_report.py: the corpus, the
library corpus, the cases corpus) executes under prediction; the GPU runs are the committed
reports/atlas-runs/corpus-run-<torch>.json, whose ground truth (runtime trace + sync-debug
mode) the rules are learned from.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))


def snippets_and_states():
    """The GPU runner's own list of snippets and its state factory: one definition of what a
    snippet is, its line, set-up and context."""
    import corpus_report

    return corpus_report.cases(), corpus_report.states


def build():
    """(derivation, problems) from the committed runs."""
    from rulelearn.derive import derive, load_runs, observe

    snippets, states = snippets_and_states()
    runs = load_runs(ROOT)
    calls, crashed = observe(snippets, states)
    d = derive(runs, snippets, calls)
    # a snippet the CPU cannot run teaches nothing; it is reported by the calibration
    return d, d.conflicts + d.unattributed, crashed


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("derive", "check"):
        print("usage: predict_rules.py derive|check", file=sys.stderr)
        return 2
    from syncguard.predict.rules import RULES_PATH
    from syncguard.reporting.sessionfile import write_atomic

    d, problems, crashed = build()
    text = d.table.to_json()
    if argv[0] == "derive":
        write_atomic(RULES_PATH, text)
        print(f"wrote {os.path.relpath(RULES_PATH, ROOT)}: {len(d.table.rules)} rules from "
              f"{len(d.table.sources)} runs")
    else:
        with open(RULES_PATH, encoding="utf-8") as f:
            if f.read() != text:
                problems.append("rules.json is stale: run tools/predict_rules.py derive")
    for k, v in sorted(crashed.items()):
        print(f"not learned from (raised on the CPU under prediction): {k}: {v}")
    for p in problems:
        print("problem:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
