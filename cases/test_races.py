"""Race detection on a real GPU: stream races and pinned-buffer reuse, and the patterns that are
clean (same stream, wait_stream, record_stream, a host sync before reuse, the merge kernels).

Every racy pattern here is run so that a timing-based check would usually *miss* it (small
buffers, a sleep so the copy has physically finished): detection must come from the missing
ordering, so the racy tests require a report on every one of 20 runs.
"""
from __future__ import annotations

import inspect
import os
import threading
import time

import pytest
import torch

from syncguard.detectors.races import RaceDetector
from syncguard.testing import marked_line

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              # the scenarios wait on events and streams on purpose: record those syncs, judge races
              pytest.mark.syncguard(mode="record")]

HERE = os.path.abspath(__file__)
RUNS = 20


def _line(marker: str) -> int:
    return marked_line(HERE, marker)


def _where(site: str) -> tuple[str, int]:
    path, line = site.rsplit(":", 1)
    return os.path.abspath(path), int(line)


def _at(site: str, marker: str) -> bool:
    return _where(site) == (HERE, _line(marker))


@pytest.fixture(autouse=True)
def _quiet_device():
    torch.cuda.init()
    torch.ones(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    yield
    torch.cuda.synchronize()


def _run(fn) -> list:
    det = RaceDetector()
    det.start()
    try:
        fn()
    finally:
        found = det.stop()
    return found


# ---------------------------------------------------------------------------------------------
# stream against stream

def test_side_stream_write_read_on_default_without_wait_is_a_race():
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    x = torch.empty(4096, device="cuda")
    torch.cuda.synchronize()

    def body():
        with torch.cuda.stream(side):
            x.fill_(1.0)  # SIDE-WRITE
        (x * 2).sum()  # MAIN-READ

    found = _run(body)
    assert len(found) == 1, found
    r = found[0]
    assert r.kind == "race"
    assert r.streams == (main.cuda_stream, side.cuda_stream)
    assert r.ops == ("aten::mul", "aten::fill_")
    assert _at(r.sites[0], "MAIN-READ") and _at(r.sites[1], "SIDE-WRITE")
    assert (os.path.abspath(r.filename), r.lineno) == (HERE, _line("MAIN-READ"))
    assert r.data_ptr == x.data_ptr()
    assert "(4096,)" in r.tensor and "float32" in r.tensor
    assert r.thread == threading.current_thread().name


def test_default_write_read_on_side_stream_without_wait_is_a_race():
    side = torch.cuda.Stream()
    x = torch.empty(1 << 16, device="cuda")
    torch.cuda.synchronize()

    def body():
        x.normal_()  # MAIN-WRITE
        with torch.cuda.stream(side):
            x.sum()  # SIDE-READ

    found = _run(body)
    assert [(r.ops, _at(r.sites[0], "SIDE-READ"), _at(r.sites[1], "MAIN-WRITE")) for r in found] \
        == [(("aten::sum", "aten::normal_"), True, True)]
    assert found[0].streams == (side.cuda_stream, torch.cuda.current_stream().cuda_stream)


def test_race_is_reported_every_run_even_when_the_work_already_finished():
    side = torch.cuda.Stream()
    x = torch.empty(16, device="cuda")
    torch.cuda.synchronize()
    hits = 0
    for _ in range(RUNS):
        def body():
            with torch.cuda.stream(side):
                x.fill_(2.0)
            time.sleep(0.002)  # the 16-element fill is long done; the ordering is still missing
            x.add(1)
        hits += len(_run(body)) == 1
    assert hits == RUNS


def test_wait_stream_makes_both_directions_clean():
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    x = torch.empty(1 << 16, device="cuda")
    torch.cuda.synchronize()

    def body():
        x.normal_()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            y = x * 2  # y allocated and written on side
        main.wait_stream(side)
        (y + x).sum()

    assert _run(body) == []


def test_record_stream_pattern_is_clean():
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    x = torch.randn(1 << 16, device="cuda")
    torch.cuda.synchronize()

    def body():
        for _ in range(3):
            side.wait_stream(main)
            with torch.cuda.stream(side):
                y = x * 2
            main.wait_stream(side)
            y.record_stream(main)
            z = y + 1
            del y  # its block goes back only once main's use is done
            x.add_(z.mean())

    assert _run(body) == []


@pytest.mark.parametrize("blocking", ["x.cpu()", "x[0].item()"])
def test_blocking_read_on_a_side_stream_then_default_write_is_clean(blocking):
    # The sync inside a blocking copy / .item() comes after its read; torch's own sanitizer
    # records the read after the sync and would call the write below a race.
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    x = torch.randn(1 << 12, device="cuda")
    torch.cuda.synchronize()

    def body():
        side.wait_stream(main)
        with torch.cuda.stream(side):
            got = x.cpu() if blocking == "x.cpu()" else x[0].item()
        x.mul_(2)  # the host waited for side's read, so this cannot overlap it
        return got

    assert _run(body) == []


def test_same_stream_producer_consumer_and_training_step_are_clean():
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(64, 256, device="cuda")
    target = torch.randint(0, 10, (64,), device="cuda")

    def body():
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(data), target)
            loss.backward()
            opt.step()

    assert _run(body) == []


def test_nested_detectors_both_see_the_race():
    side = torch.cuda.Stream()
    x = torch.empty(1024, device="cuda")
    torch.cuda.synchronize()
    outer, inner = RaceDetector(), RaceDetector()
    outer.start()
    try:
        inner.start()
        try:
            with torch.cuda.stream(side):
                x.fill_(1.0)
            x.neg()
        finally:
            got_inner = inner.stop()
    finally:
        got_outer = outer.stop()
    assert [r.ops for r in got_inner] == [r.ops for r in got_outer] == [("aten::neg", "aten::fill_")]


# ---------------------------------------------------------------------------------------------
# host against in-flight copies of pinned buffers

HOST_WRITES = {
    "copy_": lambda buf, new: buf.copy_(new),  # HOST-WRITE-copy_
    "add_": lambda buf, new: buf.add_(1.0),  # HOST-WRITE-add_
    "fill_": lambda buf, new: buf.fill_(3.0),  # HOST-WRITE-fill_
}


@pytest.mark.parametrize("write", sorted(HOST_WRITES))
def test_pinned_staging_reused_before_its_copy_finished_is_a_race_every_time(write):
    staging = torch.randn(256).pin_memory()
    new = torch.randn(256)
    dev = torch.empty(256, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    hits = 0
    for _ in range(RUNS):
        def body():
            dev.copy_(staging, non_blocking=True)  # H2D-COPY
            time.sleep(0.002)  # the 1 KiB copy has landed; the host still never synced
            HOST_WRITES[write](staging, new)

        found = _run(body)
        ok = (len(found) == 1 and found[0].ops == (f"aten::{write}", "aten::copy_")
              and _at(found[0].sites[0], f"HOST-WRITE-{write}") and _at(found[0].sites[1], "H2D-COPY")
              and found[0].streams == (stream,) and found[0].data_ptr == staging.data_ptr())
        hits += ok
        torch.cuda.synchronize()
    assert hits == RUNS, found


SYNCS = {
    "event.synchronize": lambda ev, s, dev: ev.synchronize(),
    "event.query": lambda ev, s, dev: _spin(ev.query),
    "stream.synchronize": lambda ev, s, dev: s.synchronize(),
    "stream.query": lambda ev, s, dev: _spin(s.query),
    "cuda.synchronize": lambda ev, s, dev: torch.cuda.synchronize(),
    "blocking .item() on the stream": lambda ev, s, dev: dev.sum().item(),
}


def _spin(query):
    while not query():
        pass


@pytest.mark.parametrize("sync", list(SYNCS))
def test_pinned_staging_reused_after_a_host_sync_is_clean(sync):
    staging = torch.randn(1 << 16).pin_memory()
    dev = torch.empty(1 << 16, device="cuda")
    stream = torch.cuda.current_stream()
    ev = torch.cuda.Event()

    def body():
        for i in range(RUNS):
            dev.copy_(staging, non_blocking=True)
            ev.record()
            SYNCS[sync](ev, stream, dev)
            staging.fill_(float(i))
            staging.add_(1.0)

    assert _run(body) == []


def test_sync_on_an_event_recorded_before_the_copy_does_not_count():
    staging = torch.randn(1024).pin_memory()
    dev = torch.empty(1024, device="cuda")
    ev = torch.cuda.Event()
    hits = 0
    for _ in range(RUNS):
        def body():
            ev.record()
            dev.copy_(staging, non_blocking=True)
            ev.synchronize()
            staging.zero_()

        hits += [r.ops for r in _run(body)] == [("aten::zero_", "aten::copy_")]
        torch.cuda.synchronize()
    assert hits == RUNS


def test_d2h_destination_read_or_written_before_a_sync_is_a_race():
    x = torch.randn(512, device="cuda")
    hits = 0
    for _ in range(RUNS):
        def body():
            host = x.to("cpu", non_blocking=True)  # D2H-COPY
            host.sum()  # D2H-READ
            host.zero_()  # D2H-WRITE

        found = _run(body)
        hits += ([(r.ops, _at(r.sites[0], m), _at(r.sites[1], "D2H-COPY"))
                  for r, m in zip(found, ["D2H-READ", "D2H-WRITE"])]
                 == [(("aten::sum", "aten::_to_copy"), True, True),
                     (("aten::zero_", "aten::_to_copy"), True, True)]) and len(found) == 2
        torch.cuda.synchronize()
    assert hits == RUNS


def test_d2h_destination_used_after_a_stream_sync_is_clean():
    x = torch.randn(512, device="cuda")

    def body():
        for _ in range(5):
            host = x.to("cpu", non_blocking=True)
            torch.cuda.current_stream().synchronize()
            assert torch.equal(host, x.cpu())
            host.zero_()

    assert _run(body) == []


def test_numpy_write_to_a_staging_buffer_is_found_at_the_next_sync():
    staging = torch.randn(4096).pin_memory()
    dev = torch.empty(4096, device="cuda")
    hits = 0
    for i in range(RUNS):
        def body():
            dev.copy_(staging, non_blocking=True)  # NP-COPY
            staging.numpy()[:] = float(i)  # invisible to torch's dispatcher
            torch.cuda.current_stream().synchronize()  # NP-SYNC

        found = _run(body)
        hits += (len(found) == 1 and found[0].ops == ("<unseen host write>", "aten::copy_")
                 and _at(found[0].sites[0], "NP-SYNC") and _at(found[0].sites[1], "NP-COPY"))
    assert hits == RUNS


# ---------------------------------------------------------------------------------------------
# merge kernels: small local versions (cases/merge.py belongs to another module's tests)

def _merge_inputs(tokens=4096, hidden=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(tokens, generator=g) < 0.25
    emb = torch.randn(tokens, hidden, device="cuda")
    src = torch.randn(int(mask.sum()), hidden, device="cuda")
    return emb, mask, src


def test_merge_with_cpu_mask_index_put_is_clean():
    emb, mask, src = _merge_inputs()
    expect = emb.clone()
    expect[mask.cuda()] = src

    def body():
        for _ in range(5):
            emb[mask] = src

    assert _run(body) == []
    assert torch.equal(emb, expect)


def test_merge_with_fresh_pinned_indices_and_index_copy_is_clean():
    emb, mask, src = _merge_inputs()
    expect = emb.clone()
    expect[mask.cuda()] = src

    def body():
        for _ in range(5):
            rows = mask.nonzero().squeeze(1).pin_memory()
            emb.index_copy_(0, rows.to("cuda", non_blocking=True), src)

    assert _run(body) == []
    assert torch.equal(emb, expect)


def test_merge_with_a_reused_pinned_index_buffer_and_event_wait_is_clean():
    emb, mask, src = _merge_inputs()
    rows_buf = torch.empty(mask.numel(), dtype=torch.long).pin_memory()
    done = torch.cuda.Event()

    def body():
        for step in range(5):
            if step:
                done.synchronize()  # the previous upload out of rows_buf has finished
            rows = mask.nonzero().squeeze(1)
            rows_buf[: rows.numel()].copy_(rows)
            emb.index_copy_(0, rows_buf[: rows.numel()].to("cuda", non_blocking=True), src)
            done.record()

    assert _run(body) == []


def test_merge_reusing_the_pinned_index_buffer_without_a_wait_is_a_race():
    emb, mask, src = _merge_inputs()
    rows_buf = torch.empty(mask.numel(), dtype=torch.long).pin_memory()

    def body():
        for _ in range(3):
            rows = mask.nonzero().squeeze(1)
            rows_buf[: rows.numel()].copy_(rows)  # REFILL
            emb.index_copy_(0, rows_buf[: rows.numel()].to("cuda", non_blocking=True), src)  # UPLOAD

    found = _run(body)
    assert [(r.ops, _at(r.sites[0], "REFILL"), _at(r.sites[1], "UPLOAD")) for r in found] \
        == [(("aten::copy_", "aten::_to_copy"), True, True)]
    assert found[0].what.endswith("(seen 2 times)")


# ---------------------------------------------------------------------------------------------
# the region API (integrated by scope.py)

def _audit_takes_races() -> bool:
    try:
        import syncguard
        return "races" in inspect.signature(syncguard.audit).parameters
    except Exception:
        return False


@pytest.mark.skipif(not _audit_takes_races(), reason="syncguard.audit() has no races= yet")
def test_audit_and_forbid_with_races():
    import syncguard

    side = torch.cuda.Stream()
    x = torch.empty(4096, device="cuda")
    torch.cuda.synchronize()
    with syncguard.audit(races=True) as report:
        with torch.cuda.stream(side):
            x.fill_(1.0)
        x.neg()  # AUDIT-READ
    assert [r.ops for r in report.races] == [("aten::neg", "aten::fill_")]
    assert _at(report.races[0].sites[0], "AUDIT-READ")
    assert not report.clean
    torch.cuda.synchronize()
    with pytest.raises(syncguard.SyncError) as info:
        with syncguard.forbid(races=True):
            with torch.cuda.stream(side):
                x.fill_(2.0)
            x.neg()
    assert len(info.value.report.races) == 1
    torch.cuda.synchronize()
    with syncguard.forbid(races=True) as clean:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x.fill_(3.0)
        torch.cuda.current_stream().wait_stream(side)
        x.neg()
    assert clean.races == []
