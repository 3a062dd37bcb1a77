"""Workloads the benchmarks share, so their numbers describe the same loops."""


def tiny_kernels(st, n: int = 2000):
    """Launch-bound: n one-element-wide kernels, the worst case for any per-op hook."""
    y = st["y"]
    for _ in range(n):
        y.add_(1)


def mask_merges(st, n: int):
    """The sync-free merge with a CPU mask (torch >= 2.9), n times."""
    for _ in range(n):
        st["emb"][st["mask"]] = st["rows"]
