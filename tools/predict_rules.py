"""Derive the predictor's rules table from the committed GPU runs, or check it.

    python tools/predict_rules.py derive   # rewrite syncguard/predict/rules.json
    python tools/predict_rules.py check    # exit 1 if rules.json is stale or contradicts a run

Runs on a CPU: the snippets execute under prediction; the GPU runs are committed JSON.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("derive", "check"):
        print("usage: predict_rules.py derive|check", file=sys.stderr)
        return 2
    from syncguard.predict.derive import derive, load_corpus_runs, observe_snippets
    from syncguard.predict.rules import RULES_PATH
    from tests.gpu import corpus

    runs = load_corpus_runs(ROOT)
    calls, crashed = observe_snippets(corpus.SNIPPETS, corpus.state)
    d = derive(runs, corpus.SNIPPETS, calls)
    problems = d.conflicts + d.unattributed + [f"snippet {k} raised {v}" for k, v in crashed.items()]
    text = d.table.to_json()
    if argv[0] == "derive":
        with open(RULES_PATH + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(RULES_PATH + ".tmp", RULES_PATH)
        print(f"wrote {os.path.relpath(RULES_PATH, ROOT)}: {len(d.table.rules)} rules from "
              f"{len(runs)} runs")
    else:
        with open(RULES_PATH, encoding="utf-8") as f:
            if f.read() != text:
                problems.append("rules.json is stale: run tools/predict_rules.py derive")
    for p in problems:
        print("problem:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
