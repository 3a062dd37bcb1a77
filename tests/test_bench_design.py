"""The overhead benchmark's run order (bench/design.py): balance checked by counting, on the CPU."""
import collections
import itertools

import pytest

from bench.design import round_order, whole_cycles, williams


@pytest.mark.parametrize("n", range(1, 11))
def test_each_configuration_at_each_position_and_after_each_other_equally_often(n):
    rows = williams(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    for row in rows:
        assert sorted(row) == list(range(n))
    positions = collections.Counter((pos, x) for row in rows for pos, x in enumerate(row))
    assert set(positions.values()) == {len(rows) // n}
    pairs = collections.Counter(p for row in rows for p in zip(row, row[1:]))
    if n > 1:
        assert set(pairs) == set(itertools.permutations(range(n), 2))
        assert set(pairs.values()) == {1 if n % 2 == 0 else 2}


def test_the_rotated_cycle_it_replaces_was_not_balanced_for_carry_over():
    # the old order: round r ran the cycle started at r; within rounds, 0 always followed n-1
    n = 8
    rows = [[(r + i) % n for i in range(n)] for r in range(n)]
    pairs = collections.Counter(p for row in rows for p in zip(row, row[1:]))
    assert pairs[(n - 1, 0)] == n - 1 and (0, n - 1) not in pairs


def test_whole_cycles_and_round_order():
    assert whole_cycles(101, 9) == 108 and whole_cycles(101, 8) == 104 and whole_cycles(11, 3) == 12
    assert whole_cycles(0, 4) == 4
    configs = {"a": 1, "b": 2, "c": 3}
    seen = [tuple(k for k, _ in round_order(configs, r)) for r in range(6)]
    assert len(set(seen)) == 6 and seen[0] == ("a", "b", "c")
    assert round_order(configs, 6) == round_order(configs, 0)


def test_no_configuration_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        williams(0)


def test_bare_grouped_by_what_ran_just_before_it():
    from bench.bench_overhead import after_each

    orders = [["bare", "x", "y"], ["x", "bare", "y"], ["y", "bare", "x"], ["p", "q"], ["y", "x", "bare"]]
    times = {"bare": [0.001, 0.002, 0.004, 0.006]}  # seconds, one per round that ran bare
    assert after_each(times, orders, "bare") == {"x": 4.0, "y": 4.0}
    assert after_each({"bare": [0.001, 0.003]}, [["x", "bare"], ["x", "bare"]], "bare") == {"x": 2.0}


def test_a_per_round_ratio_grouped_by_what_ran_just_before_it_is_not_scaled():
    from bench.bench_overhead import after_each

    orders = [["d", "x"], ["x", "d"], ["y", "d"], ["x", "d"]]
    ratios = {"d": [9.0, 1.02, 1.08, 1.04]}  # the first round's d ran first: left out
    assert after_each(ratios, orders, "d", scale=1) == {"x": 1.03, "y": 1.08}
