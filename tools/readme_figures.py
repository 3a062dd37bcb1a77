"""The docs' tables of measured figures, generated from the committed evidence.

    python tools/readme_figures.py           # exit 1 and name the files whose blocks differ
    python tools/readme_figures.py --write   # rewrite them (what `nox -s docs` runs)

Each generated block sits between ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->`` in the
docs file ``DOCS`` names for it; everything between the markers is replaced, nothing outside them
is touched. Numbers are printed at the precision stated here, never rounded by hand: a doc that
disagrees with the evidence fails tests/test_readme_figures.py.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MERGE_SPLIT = ROOT / "reports" / "atlas-runs" / "merge-split-2.11.0.json"
OVERHEAD = ROOT / "reports" / "gpu" / "2.11.0" / "overhead-2.11.0.json"
CALIBRATION = ROOT / "reports" / "predict" / "calibration.json"
HOST_SIZE = (131072, 8192)  # host time and peak memory are shown at the largest size

_LABELS = {
    "index_put_cpu_mask": "`index_put` with a CPU mask",
    "masked_scatter": "`masked_scatter_` (CUDA mask)",
    "index_put_gpu_mask": "`index_put` with a CUDA mask",
    "index_copy_rows": "`index_copy_` with host-computed rows",
    "triton_row_scatter": "fused Triton row scatter",
    "triton_device_rows": "Triton scatter, rows computed on the device",
}
#: the default detector's configuration, in the benchmark's words (bench/bench_overhead.py's DEFAULT)
_DEFAULT = "audit(cuda) pointer"
#: the overhead configurations docs/performance.md shows, in the benchmark's words, and how it names them
_DETECTOR_ROWS = ((_DEFAULT, "`cuda` (CUPTI; host memory by pointer: `auto`'s choice)"),
                  ("audit(cuda) pointer, Python callback",
                   "`cuda` with the Python callback (where the C one is not built)"),
                  ("audit(cuda) activity", "`cuda` (CUPTI; host memory by activity records)"),
                  ("audit(debug,trace) fallback", "`debug`+`trace` (`auto`'s fallback)"),
                  ("cupti: detector's ids, C no-op callback", "CUPTI alone, C no-op callback"),
                  ("cupti: detector's ids, Python no-op callback",
                   "CUPTI + ctypes, Python no-op callback"),
                  ("audit(debug,trace,profile)", "+ `profile`"))


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _syncs(variant: str) -> str:
    """The declared waits per call (cases/declared.py), by version range."""
    sys.path.insert(0, str(ROOT))
    from cases.declared import DECLARED_WAITS

    parts = []
    table = DECLARED_WAITS[variant]
    for i, (since, waits) in enumerate(table):
        what = ", ".join(f"{n}× {api}" for api, n in sorted(waits.counts.items())) or "none"
        if len(table) == 1:
            return what
        until = table[i + 1][0] if i + 1 < len(table) else None
        if since == (0, 0):
            parts.append(f"before {until[0]}.{until[1]}: {what}")
        else:
            parts.append(f"from {since[0]}.{since[1]}: {what}")
    return "; ".join(parts)


def merge_table(data: dict | None = None) -> str:
    """Device time (the GPU kept busy ahead of the merge, so only a wait shows) as a multiple of a
    plain copy of the same bytes, with its band over rounds, at every size; host time per call
    and peak extra memory at the largest size (bench/bench_merge.py --split).

    A variant the evidence has no row for (one added after the run) is left out, and a size it
    was not measured at shows "–": the table shows what was measured, never a blank filled in."""
    data = json.loads(MERGE_SPLIT.read_text()) if data is None else data
    rows = {(r["variant"], r["tokens"], r["hidden"]): r for r in data["results"]}
    sizes = sorted({(t, h) for _, t, h in rows}, key=lambda s: s[0] * s[1])
    env, opt = data["environment"], data["options"]
    out = [f"Measured on the {env['gpu']} with torch {env['torch']} ({opt['dtype']}, half "
           f"multimodal; median of {opt['reps']} calls per round, {opt['rounds']} rounds, "
           f"the band is the round medians' min–max; "
           f"`{MERGE_SPLIT.relative_to(ROOT).as_posix()}`):", "",
           "| variant | " + " | ".join(f"device × copy, {t}×{h}" for t, h in sizes)
           + f" | host µs per call, {HOST_SIZE[0]}×{HOST_SIZE[1]} | peak extra memory | "
           "host waits per call (declared, `cases/declared.py`) |",
           "|---" * (len(sizes) + 4) + "|"]
    measured = {v for v, _, _ in rows}
    for variant, label in _LABELS.items():
        if variant not in measured:
            continue
        cells = []
        for t, h in sizes:
            x = rows[(variant, t, h)]["device_x_copy"] if (variant, t, h) in rows else None
            cells.append(f"{x['median']:.2f}× ({x['min']:.2f}–{x['max']:.2f})" if x else "–")
        big = rows.get((variant, *HOST_SIZE))
        host = (f"{big['host_us']['median']:.1f} | {_bytes(big['peak_extra_bytes'])}" if big
                else "– | –")
        out.append(f"| {label} | " + " | ".join(cells) + f" | {host} | {_syncs(variant)} |")
    return "\n".join(out)


def _ratio(cell: dict) -> str:
    return f"{cell['ratio']:.2f}×"


def detector_cost_table() -> str:
    data = json.loads(OVERHEAD.read_text())
    workloads = list(data["results"])
    out = [f"Cost of each detector on the {data['gpu']} with torch {data['torch']} ("
           f"{data['rounds']} interleaved rounds; each round's time over the same loop without "
           "syncguard in that round, median over rounds; `audit(cuda)` rows ran the "
           f"{data.get('callback', 'Python callback')} unless named; "
           f"`{OVERHEAD.relative_to(ROOT).as_posix()}`):", "",
           "| configuration | " + " | ".join(workloads) + " |",
           "|---" * (len(workloads) + 1) + "|"]
    for key, title in _DETECTOR_ROWS:
        if all(key in data["results"][w] for w in workloads):
            out.append(f"| {title} | " + " | ".join(_ratio(data["results"][w][key])
                                                    for w in workloads) + " |")
    return "\n".join(out)


def _matrix_overhead_runs() -> list[dict]:
    """The overhead benchmark of each torch in the version matrix (``reports/cuda-torch-<v>.json``
    with a ``reports/gpu/<v>/overhead-<v>.json``), oldest torch first."""
    runs = []
    for report in sorted((ROOT / "reports").glob("cuda-torch-*.json"),
                         key=lambda p: tuple(int(x) for x in p.stem.split("-")[-1].split("."))):
        version = report.stem.split("-")[-1]
        path = ROOT / "reports" / "gpu" / version / f"overhead-{version}.json"
        if path.exists():
            runs.append(json.loads(path.read_text()))
    return runs


def detector_cost_by_version() -> str:
    """The default detector's cost on every torch of the version matrix (its own overhead run)."""
    rows = _matrix_overhead_runs()
    if not rows:
        return "No overhead run in the version matrix."
    workloads = list(rows[0]["results"])
    out = ["The default detector (`cuda`, host memory by pointer) on each torch of the version matrix: "
           "median over rounds of the per-round ratio [quartiles] (`reports/gpu/<v>/overhead-<v>.json`):", "",
           "| torch | callback | rounds | " + " | ".join(workloads) + " |",
           "|---|---|---|" + "---|" * len(workloads)]
    for data in rows:
        cells = []
        for w in workloads:
            c = data["results"][w][_DEFAULT]
            q = f" [{c['ratio_q1']:.2f}, {c['ratio_q3']:.2f}]" if "ratio_q1" in c else ""
            cells.append(_ratio(c) + q)
        out.append(f"| {data['torch']} | {data.get('callback', '')} | {data['rounds']} | "
                   + " | ".join(cells) + " |")
    return "\n".join(out + ["", over_target(rows)])


TARGET = 1.05  # the target for the default detector, × bare on each workload


def over_target(rows: list[dict], target: float = TARGET) -> str:
    """One sentence: which cells of these overhead runs are over ``target`` (each cell's median
    per-round ratio, at the JSON's three decimals). Generated, so that the prose around the table
    never says which cells pass once a new lease has moved them."""
    named = [(by[_DEFAULT]["ratio"], f"{data['torch']} {w} ({by[_DEFAULT]['ratio']:.3f}×)")
             for data in rows for w, by in data["results"].items()]
    over = [name for ratio, name in named if ratio > target]
    ci = " `reports/gpu/overhead-ci.md` gives each cell a 95% interval."
    if not over:  # the highest is named: a pass by a hair reads as one
        return (f"All {len(named)} cell(s) are at or under the {target}× target; the highest is "
                f"{max(named)[1]}." + ci)
    return f"Over the {target}× target: {len(over)} of {len(named)} cells, " + "; ".join(over) + "." + ci


def detector_cost_parts() -> str:
    """Where the default detector's cost goes, per torch and workload: the whole region against
    the same region without its entry and exit, and the two (medians over rounds, ms)."""
    out = ["The default detector's regions split (`reports/gpu/<v>/overhead-<v>.json`, row "
           "`audit(cuda) pointer`): × bare per round, the same without the region's entry and exit, "
           "and the medians of those two in ms:", "",
           "| torch | workload | × bare | × bare without entry and exit | entering, ms | leaving, ms |",
           "|---|---|---|---|---|---|"]
    for data in _matrix_overhead_runs():
        for w, rows in data["results"].items():
            c = rows[_DEFAULT]
            if "ratio_inside" not in c:
                continue
            out.append(f"| {data['torch']} | {w} | {_ratio(c)} | {c['ratio_inside']:.2f}× "
                       f"| {c['enter_ms']:.2f} | {c['exit_ms']:.2f} |")
    return "\n".join(out)


def atlas_transitions() -> str:
    """The atlas's opening lines: what the committed corpus runs say changed between torches."""
    sys.path.insert(0, str(ROOT))
    from syncguard.atlas import render as atlas

    runs = sorted((ROOT / "reports" / "atlas-runs").glob("*.json"))
    built = atlas.build((str(p), atlas.load_run(str(p))) for p in runs)
    out = [f"From {len(built.columns)} corpus runs ({', '.join(c.label for c in built.columns)}; "
           "[reports/atlas.md](../reports/atlas.md) has every pattern, cell and provenance):", ""]
    out += [f"- {t}" for t in built.transitions] or ["- no transition"]
    if built.unstable:
        out += ["", f"Not counted as transitions: {len(built.unstable)} pattern(s) whose value "
                "returns after changing (run-to-run variation; the atlas lists them): "
                + ", ".join(f"`{r.id}`" for r in built.unstable) + "."]
    return "\n".join(out)


def _share(pair: list[int]) -> str:
    ok, total = pair
    return f"{ok}/{total} ({100 * ok / total:.1f}%)"


def predict_calibration(data: dict | None = None) -> str:
    """Prediction's agreement with the GPU runs, all suites together and held out, as one
    sentence (reports/predict/calibration.json, written by tools/predict_calibrate.py)."""
    data = data if data is not None else json.loads(CALIBRATION.read_text(encoding="utf-8"))
    by_suite = {entry["stats"]["suite"]: entry["stats"] for entry in data["nearest"]}
    together = by_suite["all three suites together"]
    held = by_suite["all suites, each snippet held out of the rules"]
    return (f"Calibrated on torch {data['torch']} against the nearest measured torch "
            f"(`reports/predict/calibration.md`), all three suites together: whether it syncs "
            f"{_share(together['whether'])}, exact kind {_share(together['kind'])}, line "
            f"{_share(together['line'])}, {together['crashes']} crashes. Held out (each "
            f"snippet's rules derived without it): {_share(held['whether'])}.")


def _version_key(path: Path) -> tuple:
    return tuple(int(x) for x in path.parent.name.split("."))


def detector_summary() -> str:
    """Issue 44's summary on each torch measured (``reports/gpu/<v>/detector-summary.json``,
    ``bench/detector_summary.py``), oldest torch first."""
    paths = sorted((ROOT / "reports" / "gpu").glob("*/detector-summary.json"), key=_version_key)
    if not paths:
        return "No detector summary measured yet."
    docs = [json.loads(p.read_text()) for p in paths]
    workloads = list(docs[0]["ratios"])
    commits = sorted({d["commit"][:7] for d in docs})
    out = [f"The default detector's summary on each torch (`bench/detector_summary.py`, commit "
           f"{', '.join(commits)}; `reports/gpu/<v>/detector-summary.md` gives each ratio's "
           "interval and each scenario's verdict): an empty `audit()` entered and left, each "
           "workload's time over bare (median of per-round ratios), and the profiler scenarios.", "",
           "| torch | empty region, µs | " + " | ".join(workloads)
           + " | scenarios | profiler errors | regions without `cuda` |",
           "|---|---|" + "---|" * len(workloads) + "---|---|---|"]
    for d in docs:
        p = d["profiler"]
        out.append(f"| {d['torch']} | {d['region_enter_exit_us']:.2f} | "
                   + " | ".join(f"{d['ratios'][w]:.3f}×" for w in workloads)
                   + f" | {p['scenarios']} | {p['profiler_errors']} | {p['regions_without_cuda']} |")
    return "\n".join(out)


BLOCKS = {"predict-calibration": predict_calibration, "merge-table": merge_table, "detector-cost": detector_cost_table,
          "detector-cost-versions": detector_cost_by_version, "detector-cost-parts": detector_cost_parts,
          "atlas-transitions": atlas_transitions, "detector-summary": detector_summary}


#: which docs file holds which generated blocks (paths from the repository root)
DOCS = {"docs/prediction.md": ("predict-calibration",),
        "docs/cases.md": ("merge-table",),
        "docs/performance.md": ("detector-summary", "detector-cost-parts", "detector-cost",
                                "detector-cost-versions"),
        "docs/atlas.md": ("atlas-transitions",)}


def render(text: str, names=tuple(BLOCKS)) -> str:
    """``text`` with each block in ``names`` replaced by what the evidence says; a block missing
    from ``text`` is an error, so a doc that lost its markers cannot pass unchecked."""
    for name in names:
        make = BLOCKS[name]
        pattern = re.compile(rf"(<!-- figures:{name} -->\n)(?:.*?\n)?(<!-- /figures:{name} -->)",
                             re.S)
        if not pattern.search(text):
            raise SystemExit(f"no <!-- figures:{name} --> block")
        text = pattern.sub(lambda m: m[1] + make() + "\n" + m[2], text)
    return text


def main(argv: list[str]) -> int:
    stale = []
    for rel, names in DOCS.items():
        path = ROOT / rel
        text = path.read_text(encoding="utf-8")
        new = render(text, names)
        if new != text:
            stale.append(rel)
            if "--write" in argv:
                path.write_text(new, encoding="utf-8")
    if "--write" in argv:
        print("docs figures: up to date with the evidence")
        return 0
    if stale:
        print(f"figures in {', '.join(stale)} differ from the committed evidence: run `nox -s docs`",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
