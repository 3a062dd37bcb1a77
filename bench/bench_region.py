"""CPU micro-benchmark of an empty region's cost with the cuda detector (not a test, no GPU).

    python bench/bench_region.py [--n 20000] [--vs REV] [--rounds 3] [--out reports/cpu/region-cost.md]

An empty ``syncguard.audit()`` (the default detectors: ``auto``, resolved to ``cuda``) entered
and left, over the FAKE libcupti the CPU tests use (``tests.test_detect.FakeHub`` with the C
callback where it was built: after the first region no call reaches the library, as on the GPU
once subscribed), with ``torch.cuda.is_initialized`` made to answer True (a CPU build). It says
what our own Python costs per region; CUPTI's share, and the figure the issue's aim is stated
in, come from the GPU (``lab/probe_routing.py``).

Printed: the median µs of ``--n`` regions (perf_counter_ns around each ``with``), and the
pieces of a region, each timed alone on the same objects (the fastest of several timeit loops, µs): the
region and its report made, ``registry.resolve``, ``neighbours.present()``,
``routing.scopes_changed()``, the hub's acquire+release of a region, the backward engine's
proxy installed and restored, the hub's lock. Pieces overlap and are timed warm, so they need
not add up to the whole; they say where to cut.

``--vs REV``: the same measurement, in alternating child processes, of this checkout and of
REV's ``src/`` (from ``git archive``, with REV's own C callback: this checkout's build where
REV's C sources are the same, else built from them): the two figures side by side in one run,
and their ratio.
``--out`` writes the table as markdown.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_SOURCES = "src/syncguard/detectors/cuda/_cuptifast_c"


def _piece(fn, number: int = 2000, repeat: int = 9) -> float:
    """µs of one call of ``fn``: the fastest of ``repeat`` loops of ``number`` (timeit's way:
    the others were slowed by what else the machine ran)."""
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def measure(n: int) -> dict:
    """This process's figures (see the module docstring), over the tests' fake libcupti."""
    sys.path.insert(0, ROOT)
    import time

    import torch

    import syncguard
    from syncguard import detectors as registry
    from syncguard.detectors import routing
    from syncguard.detectors.cuda import neighbours
    from syncguard.records.events import Report
    from tests.test_detect import FakeHub, _c_callback_built  # the CPU tests' fake libcupti

    hub = FakeHub(path="c" if _c_callback_built() else "python")
    det = registry.get("cuda")
    saved = det.hub, torch.cuda.is_initialized
    det.hub, torch.cuda.is_initialized = hub, (lambda: True)
    try:
        with syncguard.audit() as rep:  # the first region subscribes (once per process)
            pass
        assert rep.detectors == ("cuda",) and hub.subscribed, (rep.detectors, rep.notes)
        hub._ready = True  # as the real hub is after its first region
        clock = time.perf_counter_ns
        samples = []
        for _ in range(n):
            t0 = clock()
            with syncguard.audit():
                pass
            samples.append(clock() - t0)
        warm = samples[len(samples) // 10:]  # the first tenth left out: warm-up
        region = syncguard.audit()
        pieces = {
            "region and its report made (audit())": _piece(syncguard.audit),
            "its report alone, as a region makes it": _piece(
                getattr(Report, "fresh", None) or (lambda: Report(detectors=()))),
            "registry.resolve(('auto',))": _piece(lambda: registry.resolve(("auto",))),
            "neighbours.present()": _piece(neighbours.present),
            "routing.scopes_changed()": _piece(routing.scopes_changed),
            "hub.acquire + release (one region)": _piece(
                lambda: (hub.acquire(region), hub.release(region))),
            "backward engine proxy install + restore": _piece(
                lambda: (hub.backward.install(), hub.backward.restore())),
            "hub lock taken and released": _piece(lambda: hub.lock.__enter__() or hub.lock.__exit__(None, None, None)),
            "regions context variable set twice": _piece(
                lambda: (routing.regions.set(routing.regions.get() + (region,)),
                         routing.regions.set(routing.regions.get()[:-1]))),
        }
        profile = _profile(syncguard.audit)
    finally:
        det.hub, torch.cuda.is_initialized = saved
        hub.close()
    return {"median_us": statistics.median(warm) / 1000, "n": len(warm), "pieces": pieces,
            "profile": profile,
            "callback": hub.callback, "python": sys.version.split()[0], "torch": torch.__version__,
            "syncguard_file": syncguard.__file__}


def _profile(audit, n: int = 5000, top: int = 10) -> list:
    """cProfile of ``n`` empty regions: the ``top`` functions by their own time, each as
    [where, share of the whole in %] (cProfile's own cost inflates small functions' shares)."""
    import cProfile
    import pstats

    def loop():
        for _ in range(n):
            with audit():
                pass
    prof = cProfile.Profile()
    prof.runcall(loop)
    stats = pstats.Stats(prof).stats
    total = sum(v[2] for v in stats.values())
    rows = sorted(((v[2], f"{os.path.basename(f)}:{line}({fn})") for (f, line, fn), v in stats.items()
                   if fn != "loop"), reverse=True)[:top]
    return [[where, 100 * t / total] for t, where in rows]


def _rev_tree(rev: str) -> str:
    """REV's src/ in a temporary folder, with REV's C callback: this checkout's build where REV's
    C sources are this checkout's, else built there from REV's own sources and setup.py (the
    columns then compare each version's own C, as a user who installs it gets)."""
    d = tempfile.mkdtemp(prefix="bench_region_")
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "src", "setup.py", "pyproject.toml"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "xf", "-", "-C", d], input=archive, check=True)
    same = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", rev, "--", C_SOURCES]).returncode == 0
    if same:
        built = os.path.join(ROOT, "src/syncguard/detectors/cuda")
        for f in os.listdir(built):
            if f.startswith("_cuptifast") and f.endswith(".so"):
                shutil.copy(os.path.join(built, f), os.path.join(d, "src/syncguard/detectors/cuda", f))
    else:
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=d,
                       check=True, capture_output=True)
    return os.path.join(d, "src")


def _child(src: str | None, n: int) -> dict:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", "--n", str(n)],
                         check=True, capture_output=True, text=True, env=env, cwd=ROOT).stdout
    got = json.loads(out.strip().splitlines()[-1])
    if src:
        assert got["syncguard_file"].startswith(src), got["syncguard_file"]
    return got


def _rev(rev: str) -> str:
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", rev], check=True,
                          capture_output=True, text=True).stdout.strip()


def table(runs: dict[str, list[dict]]) -> list[str]:
    labels = list(runs)
    first = runs[labels[0]][0]
    md = [f"# An empty region's cost on the CPU (cuda detector over the tests' fake libcupti, "
          f"{first['callback']}) · python {first['python']} · torch {first['torch']}", "",
          "`python bench/bench_region.py " + " ".join(sys.argv[1:]) + "`; each column: the "
          "median of its child processes' medians (run alternately), µs. Pieces are each timed "
          "alone, warm (fastest of 9 loops); they overlap and need not add up to the whole.", "",
          "| | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]

    def row(name, get):
        vals = [statistics.median(get(r) for r in runs[k]) for k in labels]
        return f"| {name} | " + " | ".join(f"{v:.2f}" for v in vals) + " |", vals

    line, whole = row("**empty audit() entered and left**", lambda r: r["median_us"])
    md.append(line)
    for name in first["pieces"]:
        md.append(row(name, lambda r, name=name: r["pieces"].get(name, float("nan")))[0])
    for k in labels:
        md += ["", f"cProfile of 5,000 regions, {k} (first process): own time, % of the whole", "",
               "| function | % |", "|---|---|"]
        md += [f"| {where} | {share:.1f} |" for where, share in runs[k][0]["profile"]]
    if len(labels) == 2:
        md += ["", f"{labels[1]} / {labels[0]}: **{whole[1] / whole[0]:.2f}x** "
               f"({whole[0]:.2f} -> {whole[1]:.2f} µs)"]
    return md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="regions timed per process")
    ap.add_argument("--vs", metavar="REV", help="also measure REV's src/, alternately")
    ap.add_argument("--rounds", type=int, default=3, help="child processes per version")
    ap.add_argument("--out", help="write the table here (markdown)")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.n < 10 or a.rounds < 1:
        ap.error("--n must be >= 10 and --rounds >= 1")
    if a.measure:
        print(json.dumps(measure(a.n)))
        return
    here = "this checkout (" + _rev("HEAD") + (
        "+" if subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD", "--", "src"]).returncode else "") + ")"
    trees = {}
    if a.vs:
        trees[f"{a.vs} ({_rev(a.vs)})"] = _rev_tree(a.vs)
    trees[here] = None
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(a.rounds):
        for label, src in trees.items():
            runs[label].append(_child(src, a.n))
    md = table(runs)
    print("\n".join(md))
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as fh:
            fh.write("\n".join(md) + "\n")
        os.replace(tmp, a.out)  # never a half-written table


if __name__ == "__main__":
    main()
