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


#: The library corpus (tests/gpu/library_corpus.py, the same SNIPPETS/state/sync_line protocol
#: as tests/gpu/corpus.py) joins once it and its runs exist: reports/gpu/<v>/<stem>-<v>.json.
LIBRARY = ("tests.gpu.library_corpus", "library-corpus")


def suites(corpus):
    """(file stem, module) of every snippet suite with committed runs."""
    import importlib

    found = [("corpus", corpus)]
    try:
        lib = importlib.import_module(LIBRARY[0])
    except ImportError:
        return found
    if os.path.isdir(os.path.join(ROOT, "reports", "gpu")) and any(
            f.startswith(LIBRARY[1] + "-") for _, _, files in os.walk(os.path.join(ROOT, "reports", "gpu"))
            for f in files):
        found.append((LIBRARY[1], lib))
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("derive", "check"):
        print("usage: predict_rules.py derive|check", file=sys.stderr)
        return 2
    from syncguard.predict.derive import derive, load_corpus_runs, observe_snippets
    from syncguard.predict.rules import RULES_PATH
    from syncguard.sessionfile import write_atomic
    from tests.gpu import corpus

    d, problems = None, []
    for stem, suite in suites(corpus):
        runs = load_corpus_runs(ROOT, stem)
        calls, crashed = observe_snippets(suite.SNIPPETS, suite.state)
        d = derive(runs, suite.SNIPPETS, calls, d)
        problems += [f"{stem} snippet {k} raised {v}" for k, v in crashed.items()]
    problems = d.conflicts + d.unattributed + problems
    text = d.table.to_json()
    if argv[0] == "derive":
        write_atomic(RULES_PATH, text)
        print(f"wrote {os.path.relpath(RULES_PATH, ROOT)}: {len(d.table.rules)} rules from "
              f"{len(d.table.sources)} runs")
    else:
        with open(RULES_PATH, encoding="utf-8") as f:
            if f.read() != text:
                problems.append("rules.json is stale: run tools/predict_rules.py derive")
    for p in problems:
        print("problem:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
