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


def dataloader_steps(steps: int = 64, batch: int = 512, width: int = 1024):
    """epoch(region): one pass of a 3-layer MLP (``width`` wide) with SGD over ``steps`` batches
    of a DataLoader with two worker processes and ``pin_memory=True``, so worker processes and
    the pin-memory thread are alive while it runs; each step (copy in, forward, backward, step,
    ``loss.item()`` as a training loop logs it) inside ``region()``, a new context manager per
    step (``contextlib.nullcontext`` for the bare loop, ``syncguard.audit`` for one region per
    step). The workers persist across epochs: an epoch times steps, not worker start-up."""
    import torch

    data = torch.utils.data.TensorDataset(torch.randn(steps * batch, width),
                                          torch.randn(steps * batch, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, num_workers=2, pin_memory=True,
                                         persistent_workers=True)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def epoch(region):
        for xb, yb in loader:
            with region():
                xb, yb = xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)
                loss = torch.nn.functional.mse_loss(model(xb), yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss.item()
    return epoch
