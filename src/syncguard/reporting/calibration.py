"""``syncguard calibrate``: how well a predicted run of a suite agrees with a GPU run of it.

Input: two session reports of the same suite, one measured on a GPU, one predicted on a CPU
(``pytest --syncguard`` with prediction). The GPU report is the ground truth. Only tests present
in both reports are compared (the runs may have been given other ``-k``/``-n`` options).

A **site** is (file, line, kind) of an in-scope sync (unallowed or allowed), over all compared
tests; files are named relative to each run's root (the folder the tests' node ids are relative
to, found from the frames that end with a test file), so two checkouts at other paths compare.

- ``site_recall``: the share of GPU sites also predicted, with the same kind.
- ``site_false_positive_share``: the share of predicted sites the GPU never measured (a site
  with another kind than the measured one counts as one).
- ``kind_agreement``: of the GPU sites whose line was predicted to sync at all, the share
  predicted with the right kind.
- ``test_verdict_agreement``: over tests audited in both runs, the share where both say "syncs"
  (in-scope syncs, allowed or not) or both say "clean".
- ``not_predicted_share``: of the tests audited on the GPU, the share the predicted run did not
  audit (not predicted, skipped, or never reached its call phase).
- ``failures_caused_by_prediction``: tests that failed (or errored) in the predicted run and
  passed on the GPU.

A share whose denominator is empty is ``null``. Exit codes as ``syncguard report``: 0 done,
2 bad input (one line on stderr, nothing written).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from syncguard.records.events import SchemaError
from syncguard.reporting.sessionfile import AUDITED_STATES, TestEntry, load_document, write_atomic

__all__ = ["Calibration", "calibrate", "is_predicted", "load_pair", "to_dict", "to_markdown",
           "to_text", "add_arguments", "command", "METRICS"]

#: the figures, in the order every output gives them
METRICS = ("site_recall", "site_false_positive_share", "kind_agreement", "test_verdict_agreement",
           "not_predicted_share", "failures_caused_by_prediction")

_FAILED = ("failed", "error")
Site = tuple[str, int, str]  # (file relative to the run's root, line, kind)


@dataclass(frozen=True)
class Calibration:
    """The agreement of one predicted run with one GPU run, and what each figure counts."""

    site_recall: float | None
    site_false_positive_share: float | None
    kind_agreement: float | None
    test_verdict_agreement: float | None
    not_predicted_share: float | None
    failures_caused_by_prediction: int
    counts: dict[str, int] = field(default_factory=dict)
    #: per site: measured/predicted test counts ({"site", "kind", "gpu_tests", "predicted_tests"})
    sites: list[dict[str, Any]] = field(default_factory=list)
    #: node ids, by what went wrong: "predicted_sync_measured_clean", "measured_sync_predicted_clean",
    #: "not_predicted", "failed_by_prediction"
    tests: dict[str, list[str]] = field(default_factory=dict)


def is_predicted(doc: dict[str, Any]) -> bool:
    """Whether a session report's syncs were predicted on a CPU rather than measured."""
    predict = (doc.get("options") or {}).get("predict")
    ran = (doc.get("provenance") or {}).get("detectors_ran") or ""
    return (predict not in (None, False, "off")) or ran.startswith("predict")


def load_pair(gpu_path: str | os.PathLike, predicted_path: str | os.PathLike
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both documents, read and checked; SchemaError with one line naming the file otherwise."""
    gpu = load_document(gpu_path)
    if is_predicted(gpu):
        raise SchemaError(f"{gpu_path}: this report was predicted, not measured on a GPU; give "
                          "a GPU run's report first")
    if (gpu.get("environment") or {}).get("device") != "cuda" or \
            not any(t.audit in AUDITED_STATES for t in gpu["tests"]):
        raise SchemaError(f"{gpu_path}: no test of this report was audited on a GPU")
    predicted = load_document(predicted_path)
    if not is_predicted(predicted):
        raise SchemaError(f"{predicted_path}: this report was not predicted (measured on "
                          f"{(predicted.get('environment') or {}).get('device') or '?'}); give "
                          "a predicted run's report second")
    if not {t.nodeid for t in gpu["tests"]} & {t.nodeid for t in predicted["tests"]}:
        raise SchemaError(f"{predicted_path}: no test is in both reports; they are not runs of "
                          "the same suite")
    return gpu, predicted


def _file_of(frame: Any) -> str | None:
    return getattr(frame, "filename", None)


def run_root(tests: Iterable[TestEntry]) -> str:
    """The folder the tests' node ids are relative to, as the run's frames name it: the prefix
    of a frame file ending with a node id's file (the most common such prefix); else the
    common folder of every recorded file; else ''."""
    tests = list(tests)
    node_files = {t.nodeid.split("::", 1)[0] for t in tests}
    roots: Counter[str] = Counter()
    files: set[str] = set()
    for t in tests:
        for rec in (*t.syncs, *t.allowed, *t.outside):
            for f in (rec.filename, _file_of(rec.user_frame), *map(_file_of, rec.stack)):
                if f:
                    files.add(f)
    for f in files:
        for nf in node_files:
            if f.endswith("/" + nf):
                roots[f[: -len(nf)]] += 1
    if roots:
        return roots.most_common(1)[0][0]
    absolute = [f for f in files if os.path.isabs(f)]
    return os.path.commonpath(absolute) + os.sep if len(absolute) > 1 else ""


def _sites(t: TestEntry, root: str) -> set[Site]:
    out = set()
    for rec in (*t.syncs, *t.allowed):
        name = rec.filename or "?"
        if root and name.startswith(root):
            name = name[len(root):]
        out.add((name, rec.lineno or 0, rec.kind))
    return out


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def calibrate(gpu: dict[str, Any], predicted: dict[str, Any]) -> Calibration:
    """The figures (see the module docstring) of ``predicted`` against ``gpu``."""
    g_tests = {t.nodeid: t for t in gpu["tests"]}
    p_tests = {t.nodeid: t for t in predicted["tests"]}
    both = [n for n in g_tests if n in p_tests]
    g_root = run_root(gpu["tests"])
    p_root = run_root(predicted["tests"])
    g_sites: dict[Site, int] = Counter()
    p_sites: dict[Site, int] = Counter()
    wrong: dict[str, list[str]] = {"predicted_sync_measured_clean": [],
                                   "measured_sync_predicted_clean": [], "not_predicted": [],
                                   "failed_by_prediction": []}
    agree = judged = g_audited = 0
    for n in both:
        g, p = g_tests[n], p_tests[n]
        g_sites.update(_sites(g, g_root))
        p_sites.update(_sites(p, p_root))
        if g.audit in AUDITED_STATES:
            g_audited += 1
            if p.audit not in AUDITED_STATES:
                wrong["not_predicted"].append(n)
        if g.audit in AUDITED_STATES and p.audit in AUDITED_STATES:
            judged += 1
            g_sync, p_sync = g.audit != "clean", p.audit != "clean"
            agree += g_sync == p_sync
            if g_sync != p_sync:
                wrong["predicted_sync_measured_clean" if p_sync
                      else "measured_sync_predicted_clean"].append(n)
        if p.outcome in _FAILED and g.outcome == "passed":
            wrong["failed_by_prediction"].append(n)
    hit = set(g_sites) & set(p_sites)
    lines_predicted = {(f, ln) for f, ln, _ in p_sites}
    located = [s for s in g_sites if (s[0], s[1]) in lines_predicted]
    sites = [{"site": f"{f}:{ln}", "kind": k, "gpu_tests": g_sites.get((f, ln, k), 0),
              "predicted_tests": p_sites.get((f, ln, k), 0)}
             for f, ln, k in sorted(set(g_sites) | set(p_sites))]
    counts = {"tests_compared": len(both), "tests_only_gpu": len(g_tests) - len(both),
              "tests_only_predicted": len(p_tests) - len(both), "gpu_audited": g_audited,
              "audited_in_both": judged, "verdicts_agreeing": agree, "gpu_sites": len(g_sites),
              "predicted_sites": len(p_sites), "sites_agreeing": len(hit),
              "gpu_sites_whose_line_was_predicted": len(located)}
    return Calibration(
        site_recall=_share(len(hit), len(g_sites)),
        site_false_positive_share=_share(len(set(p_sites) - set(g_sites)), len(p_sites)),
        kind_agreement=_share(len(hit), len(located)),
        test_verdict_agreement=_share(agree, judged),
        not_predicted_share=_share(len(wrong["not_predicted"]), g_audited),
        failures_caused_by_prediction=len(wrong["failed_by_prediction"]),
        counts=counts, sites=sites, tests={k: sorted(v) for k, v in wrong.items()})


def _label(doc: dict[str, Any]) -> str:
    env = doc.get("environment") or {}
    return f"torch {env.get('torch') or '?'} on {env.get('gpu') or env.get('device') or '?'}"


def to_dict(cal: Calibration, gpu_report: str, predicted_report: str,
            suite: str | None = None) -> dict[str, Any]:
    """The JSON document: the figures first, then what they count."""
    out: dict[str, Any] = {"suite": suite, "gpu_report": gpu_report,
                           "predicted_report": predicted_report}
    out.update({m: getattr(cal, m) for m in METRICS})
    out.update(counts=cal.counts, sites=cal.sites, tests=cal.tests)
    return out


def _figure(value: float | int | None) -> str:
    return "n/a" if value is None else str(value)


def _lines(cal: Calibration, gpu: dict[str, Any], predicted: dict[str, Any]) -> list[str]:
    c = cal.counts
    return [f"GPU run: {_label(gpu)}; predicted run: {_label(predicted)}",
            f"tests compared: {c['tests_compared']} (only in the GPU report: "
            f"{c['tests_only_gpu']}, only in the predicted one: {c['tests_only_predicted']})",
            f"site_recall: {_figure(cal.site_recall)} ({c['sites_agreeing']} of "
            f"{c['gpu_sites']} GPU sites predicted with the right kind)",
            f"site_false_positive_share: {_figure(cal.site_false_positive_share)} "
            f"({c['predicted_sites'] - c['sites_agreeing']} of {c['predicted_sites']} predicted "
            "sites never measured)",
            f"kind_agreement: {_figure(cal.kind_agreement)} ({c['sites_agreeing']} of "
            f"{c['gpu_sites_whose_line_was_predicted']} GPU sites whose line was predicted)",
            f"test_verdict_agreement: {_figure(cal.test_verdict_agreement)} "
            f"({c['verdicts_agreeing']} of {c['audited_in_both']} tests audited in both)",
            f"not_predicted_share: {_figure(cal.not_predicted_share)} "
            f"({len(cal.tests['not_predicted'])} of {c['gpu_audited']} tests audited on the GPU)",
            f"failures_caused_by_prediction: {cal.failures_caused_by_prediction}"]


def to_text(cal: Calibration, gpu: dict[str, Any], predicted: dict[str, Any]) -> str:
    return "\n".join(_lines(cal, gpu, predicted)) + "\n"


def _examples(names: list[str], most: int = 10) -> list[str]:
    shown = [f"- `{n}`" for n in names[:most]]
    if len(names) > most:
        shown.append(f"- … and {len(names) - most} more")
    return shown


def to_markdown(cal: Calibration, gpu: dict[str, Any], predicted: dict[str, Any],
                title: str = "syncguard calibration") -> str:
    """The figures, the sites that disagree, and examples of the tests that disagree."""
    out = [f"## {title}", ""] + [f"- {line}" for line in _lines(cal, gpu, predicted)]
    missed = [s for s in cal.sites if s["gpu_tests"] and not s["predicted_tests"]]
    false = [s for s in cal.sites if s["predicted_tests"] and not s["gpu_tests"]]
    for head, rows in (("GPU sites not predicted (with this kind)", missed),
                       ("Predicted sites never measured", false)):
        out += ["", f"### {head}: {len(rows)}", ""]
        if rows:
            out += ["| site | kind | tests (GPU) | tests (predicted) |", "|---|---|---|---|"]
            out += [f"| `{s['site']}` | {s['kind']} | {s['gpu_tests']} | {s['predicted_tests']} |"
                    for s in sorted(rows, key=lambda s: -(s["gpu_tests"] + s["predicted_tests"]))]
    for key, head in (("failed_by_prediction", "Failed when predicted, passed on the GPU"),
                      ("not_predicted", "Audited on the GPU, not predicted"),
                      ("predicted_sync_measured_clean", "Predicted to sync, measured clean"),
                      ("measured_sync_predicted_clean", "Measured to sync, predicted clean")):
        names = cal.tests[key]
        out += ["", f"### {head}: {len(names)}", ""] + _examples(names)
    return "\n".join(out) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("gpu_report", metavar="GPU_REPORT",
                        help="session report of the suite measured on a GPU (the truth)")
    parser.add_argument("predicted_report", metavar="PREDICTED_REPORT",
                        help="session report of the same suite, predicted on a CPU")
    parser.add_argument("--json", metavar="OUT",
                        help="also write the figures, sites and disagreeing tests as JSON here "
                             "(default: none)")
    parser.add_argument("--markdown", metavar="OUT",
                        help="also write the figures and what disagrees as markdown here "
                             "(default: none)")
    parser.add_argument("--suite", metavar="NAME",
                        help="the suite's name written into the JSON (default: none)")
    return parser


def command(args: argparse.Namespace) -> int:
    """Read and check both reports, then print and write; SchemaError/OSError go to the caller."""
    inputs = {Path(args.gpu_report).resolve(), Path(args.predicted_report).resolve()}
    for out in (args.json, args.markdown):
        if out and Path(out).resolve() in inputs:
            raise SchemaError(f"{out}: is one of the input reports; refusing to overwrite it")
    gpu, predicted = load_pair(args.gpu_report, args.predicted_report)
    cal = calibrate(gpu, predicted)
    if args.json:
        write_atomic(args.json, json.dumps(to_dict(cal, args.gpu_report, args.predicted_report,
                                                   args.suite), indent=1) + "\n")
    if args.markdown:
        write_atomic(args.markdown, to_markdown(cal, gpu, predicted))
    sys.stdout.write(to_text(cal, gpu, predicted))
    return 0
