"""Workloads the benchmarks and probes share, so their numbers describe the same loops."""


def tiny_kernels(st, n: int = 2000):
    """Launch-bound: n one-element-wide kernels, the worst case for any per-op hook."""
    y = st["y"]
    for _ in range(n):
        y.add_(1)


def mask_merges(st, n: int):
    """The sync-free merge with a CPU mask (torch >= 2.9), n times."""
    for _ in range(n):
        st["emb"][st["mask"]] = st["rows"]


def merge_state() -> dict:
    """The tensors of :func:`mask_merges`: 8192 bfloat16 rows of 1024 on the GPU, a CPU mask over
    about half of them, and the rows to write."""
    import torch

    mask = torch.rand(8192) < 0.5
    return {"emb": torch.randn(8192, 1024, device="cuda", dtype=torch.bfloat16), "mask": mask,
            "rows": torch.randn(int(mask.sum()), 1024, device="cuda", dtype=torch.bfloat16)}


def train_step():
    """step(st=None): one training step of a 4-layer TransformerEncoder (d=512) with AdamW on a
    batch of 8x128, its model built here."""
    import torch

    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True), 4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randn(8, 128, 512, device="cuda")

    def step(st=None):
        opt.zero_grad(set_to_none=True)
        model(data).square().mean().backward()
        opt.step()
    return step
