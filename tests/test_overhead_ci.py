"""tools/overhead_ci.py: the bootstrap interval of each overhead cell's median (CPU only; it reads
the committed benchmark JSON, no GPU)."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
import overhead_ci as oc  # noqa: E402

COMMITTED = sorted(ROOT.glob("reports/gpu/*/overhead-*.json"))


def test_rounds_that_all_agree_leave_no_interval():
    med, lo, hi, share = oc.bootstrap([1.04] * 50, target=1.05)
    assert (med, lo, hi, share) == (1.04, 1.04, 1.04, 1.0)
    assert oc.bootstrap([1.06] * 50, target=1.05)[3] == 0.0


def test_the_interval_holds_the_median_and_is_reproducible():
    ratios = [1.0 + i / 1000 for i in range(101)]  # median 1.05
    first = oc.bootstrap(ratios, target=1.05)
    assert first == oc.bootstrap(ratios, target=1.05)  # fixed seed
    med, lo, hi, share = first
    assert med == pytest.approx(1.05) and lo < med < hi and 0.3 < share < 0.7
    with pytest.raises(ValueError):
        oc.bootstrap([], target=1.05)


def test_blocks_are_resampled_whole():
    """Block bootstrap: one block holding every round can only be drawn whole, so every
    resampled median is the median itself; the same rounds drawn singly spread."""
    ratios = [1.0 + (i % 7) / 100 for i in range(42)]
    med, lo, hi, _ = oc.bootstrap(ratios, target=1.05, block=42)
    assert lo == hi == med
    _, lo1, hi1, _ = oc.bootstrap(ratios, target=1.05, block=1)
    assert lo1 < hi1


def test_single_round_blocks_draw_as_before_blocks_existed():
    """block=1 keeps the draws the committed table was first made with (random.choices over the
    rounds, seed 0): the median of each resample, recomputed here by hand."""
    import random
    ratios = [1.0 + ((i * 37) % 101) / 1000 for i in range(101)]
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=101)) for _ in range(4000))
    assert oc.bootstrap(ratios, target=1.05)[1:3] == (meds[99], meds[3899])


@pytest.mark.parametrize("n, rounds", [(9, 18), (4, 4), (3, 6)])
def test_a_cycle_is_the_williams_rows_of_the_first_rounds_configurations(n, rounds):
    doc = {"round_orders": {"w": [[f"c{i}" for i in range(n)]] * 5 + [["p1", "p2"]]}}
    assert oc.cycle(doc, "w") == rounds


def test_blocks_that_do_not_divide_the_rounds_are_refused():
    with pytest.raises(ValueError, match="blocks of 4"):
        oc.bootstrap([1.0] * 10, target=1.05, block=4)
    with pytest.raises(ValueError, match="round_orders"):
        oc.cycle({}, "w")


def test_a_round_is_divided_by_the_bare_loop_of_the_same_round():
    rounds = {"bare": [10.0, 20.0], "audit(cuda) pointer": [11.0, 21.0]}
    assert oc.paired_ratios(rounds) == [1.1, 1.05]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_each_committed_median_is_the_benchmarks_own(path):
    """The benchmark computed each cell's ratio itself when it ran (results.<w>.<config>.ratio);
    the tool recomputes it from the rounds it kept."""
    doc = json.loads(path.read_text())
    for workload, rounds in doc["rounds_ms"].items():
        mine = statistics.median(oc.paired_ratios(rounds))
        assert round(mine, 3) == doc["results"][workload][oc.CONFIG]["ratio"], workload


def test_the_committed_table_regenerates_from_the_committed_evidence():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "overhead_ci.py"), "--check",
                           "reports/gpu/overhead-ci.md"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_evidence_is_a_one_line_error(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "overhead_ci.py")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
