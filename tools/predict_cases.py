"""Run cases/ and the plugin's sample project under sync prediction on a CPU, and compare each
test with the committed H200 run.

    python tools/predict_cases.py          # writes reports/predict/cases.md and cases.json

A calibration harness, not the plugin: until ``--syncguard-predict`` is wired into the plugin,
it opens one ``predicting()`` block for the session (so collection sees CUDA as available, and
the GPU cases run) and audits each test call in a region of syncguard's ``fake`` detector fed
by the predictor, so ``allow()`` classifies predicted syncs exactly as it does measured ones.
cases/test_races.py is left out: the race detector needs CUDA's sanitizer hooks (and its
dispatch mode stacked on the predictor's crashes torch 2.13's CPU build).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
#: suite -> (pytest arguments, rootdir, committed H200 run or None for the nearest cuda-torch-*)
SUITES = {
    "cases": (["cases/test_merge.py", "cases/test_cpu_path.py", "cases/test_multigpu.py"],
              ".", None),
    "sample": (["samples/gpu_project/tests", "--rootdir", "samples/gpu_project", "-c",
                "samples/gpu_project/pytest.ini"], "samples/gpu_project",
               "reports/gpu/plugin/sample-serial.json"),
}
LEFT_OUT = {"cases/test_races.py": "race detection needs CUDA's sanitizer; not predicted",
            "samples/gpu_project/poison": "device-side asserts poison a real CUDA context; "
                                          "nothing to predict"}


def _deliver(event):
    from syncguard.regions import region as scope
    from syncguard.attribution.frames import Site
    from syncguard.detectors.routing import Observation

    return scope._deliver(Observation("fake", Site(event.filename, event.lineno, event.function,
                                                   event.stack), event.thread, api=event.api,
                                      kind=event.kind, op=event.op))


class Harness:
    def __init__(self):
        self.stack = contextlib.ExitStack()
        self.results: dict[str, dict] = {}

    def pytest_configure(self, config):
        from syncguard.regions import region as scope
        from syncguard.predict import predicting

        # what the plugin's wiring will do: every region a test opens is fed by the predictor
        orig = scope.Region.__init__

        def predicted_region(region, detectors=None, *, races=False, **kw):
            # (forbid's raising is its class's: Region.raise_on_exit)
            orig(region, ("fake",), races=False, fail_on_phases=kw.get("fail_on_phases", ()))

        scope.Region.__init__ = predicted_region
        self.stack.callback(setattr, scope.Region, "__init__", orig)
        self.stack.enter_context(predicting(on_event=_deliver))
        os.chdir(ROOT)

    def pytest_unconfigure(self, config):
        self.stack.close()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        import syncguard
        from syncguard.predict import predicted

        if item.get_closest_marker("no_syncguard"):
            outcome = yield
            self.results[item.nodeid] = {"audit": "off", "syncs": [], "unmodelled": [],
                                         "error": None}
            return
        allows = contextlib.ExitStack()
        for m in item.iter_markers("allow_sync"):  # the plugin's marker, as the plugin reads it
            allows.enter_context(syncguard.allow(*m.args, **m.kwargs))
        with predicted(on_event=_deliver) as p, syncguard.audit(("fake",)) as report, allows:
            outcome = yield
        self.results[item.nodeid] = {
            "audit": "syncs" if report.syncs else "allowed" if report.allowed else "clean",
            "syncs": [(e.kind, os.path.relpath(e.filename, ROOT) if e.filename else None,
                       e.lineno) for e in report.syncs],
            "unmodelled": [f"{u.why} at {u.where}" for u in p.unmodelled][:5],
            "error": (_headline(f"{outcome.excinfo[0].__name__}: {outcome.excinfo[1]}")[:300]
                      if outcome.excinfo else None)}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        out = yield
        rep = out.get_result()
        if rep.when == "call" and item.nodeid in self.results:
            self.results[item.nodeid]["outcome"] = "xfailed" if hasattr(rep, "wasxfail") else rep.outcome
            if rep.skipped and not hasattr(rep, "wasxfail"):  # skipped inside the test
                self.results[item.nodeid]["audit"] = "off"
        elif rep.skipped and rep.when == "setup":
            self.results[item.nodeid] = {"outcome": "skipped", "audit": "off", "syncs": [],
                                         "unmodelled": [], "error": None}


def _headline(error: str) -> str:
    """The last line naming an error (a child process's own error comes last)."""
    named = [ln.strip() for ln in error.splitlines() if "Error" in ln]
    line = named[-1] if named else error.splitlines()[0]
    return re.sub(r" at 0x[0-9a-f]+", "", line)  # object addresses change every run


def run_suite(name: str, target: str, table) -> tuple[list, list, list, str]:
    """Run one suite under prediction; rows compared with its committed run."""
    from rulelearn.calibrate import _line_mapper

    args, rootdir, ref = SUITES[name]
    h = Harness()
    # a fixed hypothesis seed: the same draws (dtypes the CPU build lacks, too) every run
    pytest.main(args + ["-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                        "--hypothesis-seed=0"], plugins=[h])
    if ref is None:
        sessions = {v: f"reports/cuda-torch-{v}.json" for v in table.versions}
        ref = sessions[table.nearest([v for v, p in sessions.items()
                                      if os.path.isfile(os.path.join(ROOT, p))], target)]
    with open(os.path.join(ROOT, ref), encoding="utf-8") as f:
        committed = {t["nodeid"]: t for t in json.load(f)["tests"]}
    maps, rows, gpu_only, missing = {}, [], [], []
    for nodeid, got in sorted(h.results.items()):
        ref_test = committed.get(nodeid)
        if ref_test is None:
            missing.append(nodeid)
            continue
        if ref_test["audit"] not in ("clean", "syncs", "allowed") or got["audit"] == "off":
            continue  # not audited on the GPU or here (skipped): nothing to compare
        path = os.path.normpath(os.path.join(rootdir, nodeid.split("::")[0]))
        remap = maps.setdefault(path, _line_mapper(ROOT, ref, path))
        measured = [(e["kind"], remap(e["lineno"]) if (e.get("filename") or "").endswith(
            os.path.basename(path)) else e["lineno"]) for e in ref_test["syncs"]
            for _ in range(e.get("count", 1))]  # session schema 2+: one record per site
        predicted = [(k, ln) for k, _, ln in got["syncs"]]
        row = {"nodeid": nodeid, "gpu_audit": ref_test["audit"], "predicted_audit": got["audit"],
               "measured": measured, "predicted": predicted, "outcome": got.get("outcome"),
               "error": got["error"], "unmodelled": got["unmodelled"],
               "whether": (ref_test["audit"] == "syncs") == (got["audit"] == "syncs"),
               "category": ref_test["audit"] == got["audit"],
               "kind": set(k for k, _ in measured) == set(k for k, _ in predicted),
               "line": (set(ln for _, ln in predicted) <= set(ln for _, ln in measured)
                        if measured and predicted else None)}
        (gpu_only if got["error"] and got.get("outcome") == "failed" else rows).append(row)
    return rows, gpu_only, missing, ref


def main() -> int:
    import torch

    from syncguard.predict.rules import load_rules
    from syncguard.reporting.sessionfile import write_atomic

    target = torch.__version__.split("+")[0]
    table = load_rules()
    pct = lambda ok, k: f"{ok}/{k} ({100.0 * ok / k:.1f}%)" if k else "n/a"  # noqa: E731
    md = ["# cases/ and the plugin's sample project under sync prediction, against H200 runs",
          "", f"Generated by `python tools/predict_cases.py` (do not edit): torch "
          f"{torch.__version__} on a CPU, predicted with the rules of the nearest measured torch, "
          "compared test by test with the committed GPU run named per row (the same per-test "
          "audit: allowed syncs are allowed by the same `allow()` blocks and `allow_sync` "
          "markers). A test that fails on the CPU because it asserts GPU-only behaviour "
          "(timing, GPU numerics, a CUDA child process) is listed, not compared.", "",
          "| suite | compared with | tests compared | whether syncs | clean / allowed only / "
          "syncs | exact kinds | line | failed on the CPU (GPU-only, listed) | with calls not "
          "predicted |", "|---|---|---|---|---|---|---|---|---|"]
    details, data = [], {"schema_version": 1, "kind": "syncguard-predict-cases",
                         "torch": torch.__version__, "left_out": LEFT_OUT, "suites": {}}
    for name in SUITES:
        rows, gpu_only, missing, ref = run_suite(name, target, table)
        n = len(rows)
        lines_cmp = [r["line"] for r in rows if r["line"] is not None]
        md.append(f"| {name} | `{ref}` | {n} | {pct(sum(r['whether'] for r in rows), n)} | "
                  f"{pct(sum(r['category'] for r in rows), n)} | "
                  f"{pct(sum(r['kind'] for r in rows), n)} | "
                  f"{pct(sum(lines_cmp), len(lines_cmp))} | {len(gpu_only)} | "
                  f"{sum(1 for r in rows if r['unmodelled'])} |")
        details += ["", f"## {name}: disagreements", ""]
        details += [f"- `{r['nodeid']}`: GPU {r['gpu_audit']} {r['measured']}, predicted "
                    f"{r['predicted_audit']} {r['predicted']}"
                    + (f"; not predicted: {r['unmodelled'][0]}" if r["unmodelled"] else "")
                    for r in rows if not (r["whether"] and r["kind"] and r["category"]
                                          and r["line"] is not False)] or ["- none"]
        details += ["", f"## {name}: tests that fail on a CPU (they assert GPU-only behaviour)", ""]
        details += [f"- `{r['nodeid']}`: {_headline(r['error'])}" for r in gpu_only] or ["- none"]
        details += [f"- `{m}`: not in the committed run" for m in missing]
        data["suites"][name] = {"reference": ref, "rows": rows, "gpu_only": gpu_only}
    md += details + ["", "## Left out", ""] + [f"- `{p}`: {why}" for p, why in LEFT_OUT.items()]
    out = os.path.join(ROOT, "reports", "predict")
    for fname, text in (("cases.md", "\n".join(md) + "\n"),
                        ("cases.json", json.dumps(data, indent=1, sort_keys=True, default=list) + "\n")):
        write_atomic(os.path.join(out, fname), text)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
