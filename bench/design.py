"""The order in which a benchmark's configurations run, round after round.

Why not the same cycle started one later each round (what the overhead benchmark did until
now): that balances positions, but every configuration keeps the same predecessor in all but
one round. Whatever a configuration leaves behind (garbage to collect, a hook's aftermath,
caches it evicted) then lands on one and the same neighbour, and its ratio to bare shifts with
no one able to tell. A Williams design (a Latin square balanced for the first-order carry-over)
puts each configuration in each position, and after each other configuration, equally often
over one cycle of its rows.
"""
from __future__ import annotations


def williams(n: int) -> list[list[int]]:
    """Rows of a Williams design for ``n`` configurations (indices 0..n-1): ``n`` rows when
    ``n`` is even, ``2n`` when it is odd (the square and its mirror). Over the rows, each index
    is at each position equally often, and each ordered pair (a, b), a != b, is adjacent (a
    just before b) equally often: once for even ``n``, twice for odd."""
    if n < 1:
        raise ValueError(f"a design needs at least one configuration, got {n}")
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows


def whole_cycles(rounds: int, n: int) -> int:
    """``rounds`` rounded up to whole cycles of the design for ``n`` configurations, so that
    every row runs equally often."""
    cycle = len(williams(n))
    return -(-max(rounds, 1) // cycle) * cycle


def round_order(configs: dict, r: int) -> list:
    """The (name, configuration) pairs of round ``r``: row ``r`` (cyclically) of the design."""
    items = list(configs.items())
    rows = williams(len(items))
    return [items[i] for i in rows[r % len(rows)]]
