"""The atlas's input: corpus run documents (schema ``syncguard-corpus-run`` 2) and merge benchmarks.

A corpus run is what one GPU machine measured for every snippet of the corpora: ``provenance``
(torch, CUDA runtime, GPU, driver, git commit, a digest of the sources, when), ``detector_sets``,
``noise_syncs``, ``summary`` (agreement per detector set) and ``snippets`` (per snippet its id,
corpus, ``error`` and ``truth``: the waits the runtime trace showed, each with its kind, API,
aten op, copy direction and host memory). tools/corpus_report.py makes them on a GPU machine
with :func:`new_run` and :func:`dumps_run`; the atlas reads them with :func:`load_run`. A merge
benchmark (``kind`` ``syncguard-merge-bench-split``, from bench/bench_merge.py) is read beside
them for the atlas's merge table.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Any, Iterable

from syncguard.records.schema import SchemaError, check_schema, check_types

__all__ = ["RUN_SCHEMA", "RUN_SCHEMA_VERSION", "BENCH_KIND", "COPY_KINDS", "wait_text", "load_run",
           "check_document", "check_run", "check_bench", "new_run", "dumps_run"]

RUN_SCHEMA, RUN_SCHEMA_VERSION = "syncguard-corpus-run", 2
BENCH_KIND = "syncguard-merge-bench-split"  # bench/bench_merge.py --split
#: the wait kinds whose copy direction and host memory a run records
COPY_KINDS = ("blocking_copy_d2h", "blocking_copy_h2d", "pageable_copy")


def wait_text(waits: Iterable[dict[str, Any]]) -> str:
    """``blocking_copy_h2d[h2d/pageable], stream_sync×2``; "clean" when nothing waits. The one
    spelling of a cell's waits, shared with the corpus runner's table."""
    counts = Counter(w["kind"] + (f"[{w.get('direction')}/{w.get('memory') or '?'}]"
                                  if w["kind"] in COPY_KINDS and w.get("direction") else "")
                     for w in waits)
    return ", ".join(f"{k}×{n}" if n > 1 else k for k, n in sorted(counts.items())) or "clean"



def load_run(path: str) -> dict[str, Any]:
    """One corpus run (or merge benchmark), checked; SchemaError with a one-line reason otherwise."""
    from syncguard.reporting.sessionfile import read_json

    doc = read_json(path, "corpus run")
    try:
        check_document(doc)
    except SchemaError as e:
        raise SchemaError(f"{path}: {e}") from None
    return doc


def check_document(doc: Any) -> None:
    """Raise SchemaError unless ``doc`` is a corpus run or a merge benchmark the atlas can read."""
    if isinstance(doc, dict) and doc.get("kind") == BENCH_KIND:
        check_schema(doc, "merge benchmark", (1,))
        check_bench(doc)
        return
    if not isinstance(doc, dict) or doc.get("schema") != RUN_SCHEMA:
        raise SchemaError(f"not a corpus run (schema {RUN_SCHEMA!r}); "
                          "write one with tools/corpus_report.py")
    check_schema(doc, "corpus run", (RUN_SCHEMA_VERSION,))
    check_run(doc)


def new_run(provenance: dict[str, Any], detector_sets: dict[str, str], noise_syncs: int | None,
            snippets: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """A corpus run document, schema and version filled in, checked as :func:`load_run` checks."""
    doc = {"schema": RUN_SCHEMA, "schema_version": RUN_SCHEMA_VERSION, "provenance": provenance,
           "detector_sets": detector_sets, "noise_syncs": noise_syncs, "snippets": snippets,
           "summary": summary}
    check_run(doc)
    return doc


def dumps_run(doc: dict[str, Any]) -> str:
    """The committed spelling of a run: checked, keys sorted, one-space indent, final newline
    (a run re-written from its own file is byte for byte the same)."""
    check_document(doc)
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


# What the atlas reads of a run, with the types it reads it as (syncguard.records.schema.VALUE_TYPES):
# checked for its keys alone, a value of another type (``"snippets": null``, a wait without its
# API) would surface as a traceback in the renderer instead of a one-line reason.
_PROVENANCE = dict.fromkeys(("torch", "cuda_runtime", "gpu", "driver", "git_commit",
                             "source_sha256", "created", "truth_source"), "str | None")
_AGREEMENT = dict.fromkeys(("syncs_agree", "judged", "kind_agree", "kind_judged",
                            "events_on_line", "events", "other_threads"), "float")
_SNIPPET = {"id": "str", "corpus": "str", "doc": "str | None", "error": "str | None",
            "truth": "dict | None"}
_WAIT = {"kind": "str", "api": "str", "op": "str | None", "direction": "str | None",
         "memory": "str | None"}
_RESULT = {"variant": "str", "tokens": "int", "hidden": "int", "device_x_copy": "dict",
           "host_us": "dict", "peak_extra_bytes": "float"}
_SPREAD = dict.fromkeys(("median", "min", "max"), "float")


def check_run(doc: dict[str, Any]) -> None:
    check_types(doc, {"provenance": "dict", "snippets": "list", "summary": "dict"}, "corpus run",
                required=("provenance", "snippets", "summary"))
    check_types(doc["provenance"], _PROVENANCE, "provenance")
    check_types(doc["summary"], {"default": "dict | None"}, "summary")
    if doc["summary"].get("default"):
        check_types(doc["summary"]["default"], _AGREEMENT, "summary.default", required=_AGREEMENT)
    for i, snippet in enumerate(doc["snippets"]):
        check_types(snippet, _SNIPPET, f"snippets[{i}]", required=("id", "corpus"))
        truth = snippet.get("truth") or {}
        check_types(truth, {"why": "str | None", "waits": "list"}, f"snippets[{i}].truth")
        for j, wait in enumerate(truth.get("waits", [])):
            check_types(wait, _WAIT, f"snippets[{i}].truth.waits[{j}]", required=("kind", "api"))


def check_bench(doc: dict[str, Any]) -> None:
    check_types(doc, {"environment": "dict", "results": "list"}, "merge benchmark",
                required=("environment", "results"))
    env = doc["environment"]
    check_types(env, {"torch": "str | None", "gpu": "str | None", "project": "dict | None"},
                "environment")
    check_types(env.get("project") or {}, {"commit": "str | None"}, "environment.project")
    for i, result in enumerate(doc["results"]):
        check_types(result, _RESULT, f"results[{i}]", required=_RESULT)
        for key in ("device_x_copy", "host_us"):
            check_types(result[key], _SPREAD, f"results[{i}].{key}", required=_SPREAD)
