"""tools/probe_design.py's reading, on made-up rounds (CPU only: the timing itself needs the
H200, and its runs are committed under reports/probes/)."""
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import probe_design as pd  # noqa: E402


def test_a_constant_gap_between_the_designs_is_read_exactly():
    two = [1.0 + (i % 5) / 100 for i in range(36)]
    nine = [x + 0.01 for x in two]
    diff, lo, hi = pd.difference(nine, two, block=18)
    assert diff == pytest.approx(0.01) and lo == pytest.approx(0.01) and hi == pytest.approx(0.01)


def test_pairs_are_drawn_whole_and_the_interval_spans_their_spread():
    two = [1.0] * 36
    nine = [1.0] * 18 + [1.1] * 18  # one pair at no difference, one at 0.1
    diff, lo, hi = pd.difference(nine, two, block=18)
    assert (lo, hi) == (pytest.approx(0.0), pytest.approx(0.1)) and lo <= diff <= hi


def test_unequal_or_partial_blocks_are_refused():
    with pytest.raises(ValueError, match="whole number of blocks"):
        pd.difference([1.0] * 18, [1.0] * 36, block=18)
    with pytest.raises(ValueError, match="whole number of blocks"):
        pd.difference([1.0] * 10, [1.0] * 10, block=18)


def test_the_table_reads_each_designs_rounds():
    nine = {"default_ms": [11.0] * 18, "bare_ms": [10.0] * 18}
    two = {"default_ms": [10.2] * 18, "bare_ms": [10.0] * 18}
    doc = {"torch": "2.8.0+cu128", "gpu": "H200", "callback": "C callback", "commit": "abc1234",
           "dirty": False, "pairs": 1, "block_rounds": 18, "configs_nine": ["bare", "x"],
           "workloads": {"100 merges": {"first": ["nine"], "nine": nine, "two": two}}}
    row = [line for line in pd.render(doc) if line.startswith("| 100 merges")]
    assert len(row) == 1
    assert "| 1.100 [1.100, 1.100] | 1.020 [1.020, 1.020] | +0.080 [+0.080, +0.080] | 10.00 / 10.00 |" in row[0]
    assert statistics.median(pd.ratios(two)) == pytest.approx(1.02)
