"""Which part of the corpus runner breaks torch 2.11's profiler for the ground-truth pass? Runs
tools/corpus_report.run() in one process per variant, with one thing changed (probe, 2026-11-30):
asis, skip2 (no default-detector pass), nonoise (no helper thread), onunsub (unsubscribe
without disabling callbacks first), nocapture, nocompile, nN (default pass on the first N
snippets only), corpus35, lib_only. `python tools/probe_truth_bisect.py many V1 V2 ...`."""
import importlib.util, json, subprocess, sys, os
if len(sys.argv) == 1 or sys.argv[1] == "many":
    for v in sys.argv[2:] if len(sys.argv) > 2 else ["n1", "n5", "n20", "corpus35", "lib_only"]:
        p = subprocess.run([sys.executable, __file__, v], capture_output=True, text=True, timeout=300)
        lines = [l for l in (p.stdout + p.stderr).splitlines() if l.startswith(("2.", "3.", "4.", "RESULT", "Traceback", "RuntimeError"))]
        print(v, p.returncode, " | ".join(lines[-5:]), flush=True)
    sys.exit(0)
v = sys.argv[1]
sys.path.insert(0, os.getcwd())
spec = importlib.util.spec_from_file_location("cr", "tools/corpus_report.py")
cr = importlib.util.module_from_spec(spec); spec.loader.exec_module(cr)
orig_md = cr.measure_detectors
if v.startswith("skip2"):
    cr.measure_detectors = lambda c, st, dets: orig_md(c, st, dets) if dets else {"skipped": 1}
if v == "nonoise":
    cr.Noise._loop = lambda self: None
if v == "onunsub":
    from syncguard.detectors.cuda import detector as K
    def _unsub(self):
        K.unwrap(self._saved_profiler); self.backward.restore()
        if self.subscribed:
            self.subscribed = self.parked = False
            self.lib.lib.cuptiUnsubscribe(self.handle); self.handle = __import__("ctypes").c_void_p()
    K.CuptiHub._unsubscribe = _unsub
orig_cases = cr.cases
import itertools
if v[:1] == "n" and v[1:].isdigit():
    keep = {c["id"] for c in orig_cases()[: int(v[1:])]}
    cr.measure_detectors = lambda c, st, dets: orig_md(c, st, dets) if dets or c["id"] in keep else {"skipped": 1}
if v == "corpus35":
    cr.measure_detectors = lambda c, st, dets: orig_md(c, st, dets) if dets or c["corpus"] == "corpus" else {"skipped": 1}
if v == "lib_only":
    cr.measure_detectors = lambda c, st, dets: orig_md(c, st, dets) if dets or c["corpus"] != "corpus" else {"skipped": 1}
if "nocapture" in v:
    cr.cases = lambda: [c for c in orig_cases() if not c["capture"] and "graph" not in c["name"]]
if v == "nocompile":
    cr.cases = lambda: [c for c in orig_cases() if "compile" not in c["name"]]
doc = cr.run()
bad = [s["id"] for s in doc["snippets"] if s["truth"] and not s["truth"].get("ok")]
print("RESULT", v, "truth failed", len(bad), bad[:3])
