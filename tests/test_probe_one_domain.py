"""tools/probe_one_domain.py's table, on made-up rounds (CPU only: the timing itself needs the
H200, and its runs are committed under reports/probes/)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import probe_one_domain as po  # noqa: E402


def test_each_row_is_read_against_bare_and_the_one_domain_rows_against_the_shipped_one():
    n = 8
    times = {"bare": [10.0] * n, po.SHIPPED: [10.4] * n,
             "audit(cuda), driver ids only": [10.3] * n, "audit(cuda), runtime ids only": [10.2] * n}
    doc = {"torch": "2.11.0+cu130", "gpu": "H200", "callback": "C callback", "commit": "abc1234",
           "dirty": False, "rounds": n, "ids": {po.SHIPPED: 45}, "rounds_ms": {"100 merges": times}}
    rows = {line.split(" | ")[1]: line for line in po.render(doc) if line.startswith("| 100 merges")}
    assert "| 1.040 [1.040, 1.040] |  |" in rows[po.SHIPPED]  # 10.4 / 10.0, no shipped column
    # 10.3 / 10.4 and 10.2 / 10.4, every round alike: no spread in the interval
    assert rows["audit(cuda), driver ids only"].endswith("| 0.990 [0.990, 0.990] |")
    assert rows["audit(cuda), runtime ids only"].endswith("| 0.981 [0.981, 0.981] |")
    assert set(rows) == set(times)
