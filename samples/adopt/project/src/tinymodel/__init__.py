"""A tiny model package: the code under test in the adoption walkthrough.

No GPU here: each ``fake_sync()`` stands where real code would sync (the comment names the real
call), and the sample's pytest.ini selects syncguard's fake detector, which reports those lines.
"""
from syncguard.testing import fake_sync


def route(scores, k):
    """Top-k routing; reads the tokens per expert back to size the output."""
    fake_sync(kind="blocking_copy_d2h", api="cudaMemcpyAsync", op="aten::_to_copy")  # counts.tolist()
    return sorted(scores)[-k:]


def train_step(batch):
    loss = sum(batch)
    fake_sync(op="aten::_local_scalar_dense")  # loss.item() for the progress log
    return loss
