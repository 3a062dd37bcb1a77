"""The docs' tables of measured figures agree with the committed evidence (no hand-copied
numbers). The expected text is generated from reports/ by tools/readme_figures.py, the same code
`nox -s docs` runs; this test only compares."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _figures():
    spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "tools" / "readme_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("doc", ["docs/cases.md", "docs/performance.md", "docs/atlas.md",
                                 "docs/prediction.md"])
def test_docs_tables_match_the_committed_evidence(doc):
    figures = _figures()
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert doc in figures.DOCS
    assert figures.render(text, figures.DOCS[doc]) == text, f"{doc}'s figures differ: run `nox -s docs`"


def test_every_generated_block_has_a_home_and_the_readme_has_none():
    figures = _figures()
    homes = [name for names in figures.DOCS.values() for name in names]
    assert sorted(homes) == sorted(figures.BLOCKS)
    assert "<!-- figures:" not in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_calibration_sentence_reads_the_two_suites_it_names():
    """Made-up calibration data: the sentence takes the all-suites and held-out rows, by name."""
    stats = lambda suite, whether, kind, line, crashes: {"stats": {  # noqa: E731
        "suite": suite, "whether": whether, "kind": kind, "line": line, "crashes": crashes}}
    data = {"torch": "9.9.0+cpu", "nearest": [
        stats("corpus (tests/gpu/corpus.py)", [1, 1], [1, 1], [1, 1], 0),
        stats("all three suites together", [45, 50], [40, 50], [20, 25], 1),
        stats("all suites, each snippet held out of the rules", [30, 50], [29, 50], [9, 10], 0)]}
    text = _figures().predict_calibration(data)
    assert text.startswith("Calibrated on torch 9.9.0+cpu against the nearest measured torch")
    assert "whether it syncs 45/50 (90.0%), exact kind 40/50 (80.0%), line 20/25 (80.0%), 1 crashes" in text
    assert text.endswith("derived without it): 30/50 (60.0%).")


def test_a_doc_that_lost_its_block_is_an_error():
    with pytest.raises(SystemExit, match="figures:merge-table"):
        _figures().render("no markers here\n", ("merge-table",))


def test_the_generated_figures_are_the_evidence_at_the_stated_precision():
    """Spot-check against the JSON read here directly, at the precision the table states (a
    figure rounded by hand would differ from it)."""
    row = _row()
    table = _figures().merge_table()
    x = row["device_x_copy"]
    assert f"| `masked_scatter_` (CUDA mask) | " in table
    assert f"{x['median']:.2f}× ({x['min']:.2f}–{x['max']:.2f})" in table
    assert f"| {row['host_us']['median']:.1f} |" in table


def test_a_drifted_figure_is_caught():
    figures = _figures()
    text = (ROOT / "docs/cases.md").read_text(encoding="utf-8")
    drifted = text.replace(f"{_row()['device_x_copy']['median']:.2f}×", "19.4×", 1)
    assert drifted != text and figures.render(drifted, ("merge-table",)) == text


def test_a_variant_missing_from_the_evidence_is_left_out_not_a_failure():
    """A variant added after a committed run (as triton_device_rows once was) has a label but no
    rows: the table skips it. One measured at some sizes only shows "–" where it was not."""
    figures = _figures()
    bench = json.loads((ROOT / "reports/atlas-runs/merge-split-2.11.0.json").read_text())
    assert "triton_device_rows" in figures._LABELS
    bench = dict(bench, results=[r for r in bench["results"] if r["variant"] != "triton_device_rows"])
    table = figures.merge_table(bench)
    assert figures._LABELS["triton_device_rows"] not in table
    assert "| fused Triton row scatter |" in table
    partial = dict(bench, results=[r for r in bench["results"]
                                   if not (r["variant"] == "masked_scatter" and r["tokens"] in
                                           (2048, 131072))])
    line = next(x for x in figures.merge_table(partial).splitlines()
                if x.startswith("| `masked_scatter_` (CUDA mask) |"))
    # label | 2048x2048 | 8192x4096 | 32768x4096 | 131072x8192 | host µs | peak | waits
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == cells[4] == cells[5] == cells[6] == "–", cells
    assert "–" not in (cells[2], cells[3], cells[7]), cells


def _row() -> dict:
    bench = json.loads((ROOT / "reports/atlas-runs/merge-split-2.11.0.json").read_text())
    return next(r for r in bench["results"]
                if r["variant"] == "masked_scatter" and r["tokens"] == 131072)


def test_the_readme_and_the_matrix_doc_say_a_cpu_run_measures_no_sync_it_predicts():
    """Without CUDA the plugin predicts by default (issue 45): both say nothing is measured
    there, and that what a CPU run shows is predicted."""
    for doc in ("README.md", "docs/version-matrix.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        claim = text.index("**A CPU CI run measures no sync")
        assert "predict" in text[claim:claim + 200], doc


def test_the_sentence_under_the_version_table_names_exactly_the_cells_over_the_target():
    """Made-up runs (not the evidence): one cell over, one exactly at the target, one under."""
    def run(torch, ratios):
        return {"torch": torch, "results": {w: {"audit(cuda) pointer": {"ratio": r}}
                                            for w, r in ratios.items()}}
    figures = _figures()
    rows = [run("2.8.0", {"merges": 1.064, "step": 1.05}), run("2.11.0", {"merges": 1.049})]
    said = figures.over_target(rows, 1.05)
    assert said.startswith("Over the 1.05× target: 1 of 3 cells, 2.8.0 merges (1.064×).")
    assert "step" not in said and "2.11.0" not in said
    assert figures.over_target([run("2.11.0", {"merges": 1.049, "step": 1.02})], 1.05) == \
        ("All 2 cell(s) are at or under the 1.05× target; the highest is 2.11.0 merges (1.049×). "
         "`reports/gpu/overhead-ci.md` gives each cell a 95% interval.")
