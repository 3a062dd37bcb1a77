"""CPU plumbing tests for syncguard.detectors.races.

No GPU here, so nothing in this file proves GPU behaviour (cases/test_races.py does that on the
device). What runs here is real code fed with FAKES, each one named where it is used:
synthetic access records given to torch's own sanitizer EventHandler, synthetic copy / sync
observations given to the PinnedTracker over torch's real StreamSynchronizations, trace callbacks
fired by hand through torch.cuda._gpu_trace, and ordinary CPU memory standing in for pinned memory.
"""
from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from syncguard.testing import marked_line
import torch

from syncguard.detectors import races
from syncguard.records.events import RACE, RaceEvent
from syncguard.detectors import pinned
from syncguard.detectors.pinned import PinnedTracker, byte_range
from syncguard.detectors.races import RaceDetector

san = pytest.importorskip("torch.cuda._sanitizer")
from torch.utils import _python_dispatch as pd  # noqa: E402

HERE = __file__
S0, S1 = 0, 0x51DE  # fake stream handles (the trace reports cudaStream_t values as ints)


def _line(marker: str) -> int:
    return marked_line(HERE, marker)


def _site(marker: str) -> str:
    return f"{HERE}:{_line(marker)}"


def _mode_stack():
    return pd._get_current_dispatch_mode_stack()


# ---------------------------------------------------------------------------------------------
# lifecycle

def test_without_cuda_start_stop_do_nothing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    det = RaceDetector()
    det.start()
    assert _mode_stack() == []
    assert det.stop() == []
    assert "CUDA is not available" in det.reason
    assert det.stop() == []  # idempotent


def test_import_touches_neither_cuda_nor_the_sanitizer():
    code = ("import sys, torch, syncguard.detectors.races; "
            "assert 'torch.cuda._sanitizer' not in sys.modules; "
            "assert not torch.cuda.is_initialized(); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_bad_checksum_limit_is_refused():
    with pytest.raises(ValueError, match="checksum_max_bytes.*-1"):
        RaceDetector(checksum_max_bytes=-1)


def test_start_stop_restore_mode_stack_and_query():
    # _assume_cuda runs the real machinery on CPU: mode, hub, query wrappers (FAKE: no device).
    ev_query, st_query = torch.cuda.Event.__dict__["query"], torch.cuda.Stream.__dict__["query"]
    det = RaceDetector(_assume_cuda=True)
    assert det.stop() == []  # stop before start is harmless
    det.start()
    try:
        assert [type(m).__name__ for m in _mode_stack()] == ["RaceMode"]
        assert torch.cuda.Event.__dict__["query"].__wrapped__ is ev_query
        assert torch.cuda.Stream.__dict__["query"].__wrapped__ is st_query
        with pytest.raises(RuntimeError, match="start\\(\\) called twice"):
            det.start()
        x = torch.arange(6.0)
        assert torch.equal(x.add_(1) * 2, torch.arange(1.0, 7.0) * 2)  # ops pass through
    finally:
        assert det.stop() == []
    assert _mode_stack() == []
    assert torch.cuda.Event.__dict__["query"] is ev_query
    assert torch.cuda.Stream.__dict__["query"] is st_query
    assert races._HUB.detectors == ()
    assert det.stop() == []
    det.start()  # a stopped detector can run again
    assert len(_mode_stack()) == 1
    det.stop()
    assert _mode_stack() == []


def test_stop_keeps_a_mode_pushed_above_ours():
    class Other(pd.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    det = RaceDetector(_assume_cuda=True)
    det.start()
    other = Other()
    other.__enter__()
    try:
        det.stop()
        assert _mode_stack() == [other]
    finally:
        other.__exit__(None, None, None)
    assert _mode_stack() == []


def test_nested_detectors_unwind():
    outer, inner = RaceDetector(_assume_cuda=True), RaceDetector(_assume_cuda=True)
    outer.start()
    inner.start()
    assert len(_mode_stack()) == 2 and len(races._HUB.detectors) == 2
    torch.ones(3).mul_(2)
    assert inner.stop() == [] and outer.stop() == []
    assert _mode_stack() == [] and races._HUB.detectors == ()


def test_stock_sanitizer_callbacks_are_gated():
    import torch.cuda._gpu_trace as gpu_trace

    det = RaceDetector(_assume_cuda=True)
    det.start()
    det.stop()  # installs the hub (imports the sanitizer) once
    stock = san.cuda_sanitizer
    handler = stock.dispatch.event_handler
    regs = [gpu_trace.MemoryAllocationCallbacks, gpu_trace.StreamSynchronizationCallbacks]
    assert not any(getattr(cb, "__self__", None) is handler for r in regs for cb in r.callback_list)
    ptr = 0xABC000
    # FAKE trace event fired by hand: the disabled stock sanitizer must not record it...
    gpu_trace.MemoryAllocationCallbacks.fire_callbacks(ptr)
    assert ptr not in handler.tensors_accessed.accesses
    stock.enabled = True  # ...and must again once enabled (flag only; no mode is entered)
    try:
        gpu_trace.MemoryAllocationCallbacks.fire_callbacks(ptr)
    finally:
        stock.enabled = False
    assert ptr in handler.tensors_accessed.accesses
    handler.tensors_accessed.delete_tensor(ptr)


def test_trace_callbacks_reach_only_running_detectors():
    import torch.cuda._gpu_trace as gpu_trace

    det = RaceDetector(_assume_cuda=True)
    det.start()
    try:
        # FAKE trace: a stream creation and an event record seen by the hub.
        gpu_trace.StreamCreationCallbacks.fire_callbacks(S1)
        gpu_trace.EventCreationCallbacks.fire_callbacks(77)
        gpu_trace.EventRecordCallbacks.fire_callbacks(77, S1)
        syncs = det._handler.syncs
        assert S1 in syncs.current_sync_states and 77 in syncs.recorded_sync_states
    finally:
        det.stop()
    assert det._handler is None
    gpu_trace.EventRecordCallbacks.fire_callbacks(78, S1)  # no detector: ignored, no error


# ---------------------------------------------------------------------------------------------
# stream races: synthetic access records through torch's EventHandler, converted by us

def _launch(handler, stream, *, read=(), write=(), op=torch.ops.aten.mul.Tensor):
    ptrs = set(read) | set(write)
    return handler._handle_kernel_launch(stream, set(read), set(write), set(), op._schema,
                                         {p: ["self"] for p in ptrs})


def test_unordered_accesses_become_a_race_event():
    handler = races._handler_class(san)()
    x = torch.empty(4096)
    ptr = x.data_ptr()
    handler._handle_stream_creation(S1)
    fill, mul = torch.ops.aten.fill_.Scalar._schema, torch.ops.aten.mul.Tensor._schema
    # the launches are called from here, so this file's lines are the access sites
    assert handler._handle_kernel_launch(S1, set(), {ptr}, set(), fill, {ptr: ["self"]}) == []  # W
    errors = handler._handle_kernel_launch(S0, {ptr}, set(), set(), mul, {ptr: ["self"]})  # R
    assert len(errors) == 1
    key, make = races.stream_race_event(errors[0], x)
    ev = make()
    assert ev.kind == RACE and ev.data_ptr == ptr
    assert ev.streams == (S0, S1)
    assert ev.ops == ("aten::mul", "aten::fill_")
    assert ev.sites == (_site("R"), _site("W"))
    assert (ev.filename, ev.lineno) == (HERE, _line("R"))
    assert ev.tensor == f"shape (4096,) float32 @0x{ptr:x}"
    assert "read on stream 0 (default)" in ev.what and "write on stream 0x51de" in ev.what
    assert RaceEvent.from_dict(ev.to_dict()) == ev


def test_an_event_wait_orders_the_accesses():
    handler = races._handler_class(san)()
    handler._handle_stream_creation(S1)
    _launch(handler, S1, write={1000})
    handler._handle_event_creation(5)
    handler._handle_event_record(5, S1)
    handler._handle_event_wait(5, S0)
    assert _launch(handler, S0, read={1000}) == []


def test_repeated_race_is_one_event_with_a_count():
    handler = races._handler_class(san)()
    handler._handle_stream_creation(S1)
    log = pinned._Races()
    for _ in range(3):
        _launch(handler, S1, write={2000})
        for err in _launch(handler, S0, read={2000}):
            log.add(*races.stream_race_event(err))
    (ev,) = log.events()
    assert ev.what.endswith("(seen 3 times)")
    assert ev.tensor == f"tensor @0x{2000:x}"


def test_frames_site_skips_torch_and_syncguard():
    import traceback

    torch_file = torch.__file__
    frames = [traceback.FrameSummary("/user/a.py", 3, "f", lookup_line=False),
              traceback.FrameSummary("/user/b.py", 9, "g", lookup_line=False),
              traceback.FrameSummary(races.__file__, 1, "_dispatch", lookup_line=False),
              traceback.FrameSummary(torch_file, 1, "__call__", lookup_line=False)]
    assert pinned.frames_site(frames) == ("/user/b.py", 9)
    assert pinned.frames_site(frames[2:]) == (None, None)


# ---------------------------------------------------------------------------------------------
# pinned buffers: PinnedTracker over torch's StreamSynchronizations with FAKE copy/sync
# observations; plain CPU tensors stand in for pinned memory (the tracker never checks).

def _tracker():
    syncs = san.StreamSynchronizations()
    log = pinned._Races()
    return PinnedTracker(syncs, log), syncs, log


def _copy(tracker, syncs, buf, *, stream=S1, seq=1, writes_host=False, pending=True):
    syncs.update_seq_num(stream, seq)  # FAKE: the copy's launch
    tracker.device_access(*byte_range(buf), stream=stream, seq=seq, writes_host=writes_host,
                          op="aten::copy_", site=lambda: ("copy.py", 10),
                          tensor=pinned.describe(buf), data_ptr=buf.data_ptr(), pending=pending,
                          lifetime=buf)


def _host(tracker, buf, write=True, op="aten::add_"):
    tracker.host_access(*byte_range(buf), write=write, op=op, site=lambda: ("host.py", 20),
                        tensor=pinned.describe(buf), data_ptr=buf.data_ptr())


def test_host_write_during_h2d_copy_is_a_race():
    tracker, syncs, log = _tracker()
    buf = torch.zeros(256)
    _copy(tracker, syncs, buf)
    _host(tracker, buf, write=False, op="aten::sum")  # reading a copy source is fine
    assert log.events() == []
    _host(tracker, buf[100:120])  # a write to part of it is not
    (ev,) = log.events()
    assert ev.kind == RACE and ev.streams == (S1,) and ev.ops == ("aten::add_", "aten::copy_")
    assert ev.sites == ("host.py:20", "copy.py:10") and (ev.filename, ev.lineno) == ("host.py", 20)
    assert "host write" in ev.what and "H2D" in ev.what


def test_host_read_of_unfinished_d2h_destination_is_a_race():
    tracker, syncs, log = _tracker()
    buf = torch.zeros(64)
    _copy(tracker, syncs, buf, writes_host=True)
    _host(tracker, buf, write=False, op="aten::sum")
    (ev,) = log.events()
    assert "host read" in ev.what and "D2H" in ev.what


def test_disjoint_bytes_do_not_race():
    tracker, syncs, log = _tracker()
    buf = torch.zeros(256)
    _copy(tracker, syncs, buf[:128])
    _host(tracker, buf[128:])
    assert log.events() == []


@pytest.mark.parametrize("sync", ["stream", "device", "event_after_copy", "event_then_wait"])
def test_a_covering_host_sync_ends_the_hazard(sync):
    tracker, syncs, log = _tracker()
    buf = torch.zeros(64)
    _copy(tracker, syncs, buf)
    if sync == "stream":
        syncs.all_streams_wait_for_stream(S1)
    elif sync == "device":
        syncs.sync_all_streams()
    else:
        syncs.create_event(9)
        syncs.record_state(9, S1)
        if sync == "event_then_wait":  # a stream wait alone is not a host sync...
            syncs.stream_wait_for_event(S0, 9)
            tracker.host_synced(lambda: ("s.py", 1))
            _host(tracker, buf)
            assert len(log.events()) == 1
            return
        syncs.all_streams_wait_for_event(9)
    tracker.host_synced(lambda: ("s.py", 1))
    assert tracker.pending == []
    _host(tracker, buf)
    assert log.events() == []


@pytest.mark.parametrize("sync", ["other_stream", "event_before_copy"])
def test_a_sync_that_does_not_cover_the_copy_leaves_the_race(sync):
    tracker, syncs, log = _tracker()
    buf = torch.zeros(64)
    syncs.create_event(9)
    syncs.update_seq_num(S1, 1)  # earlier work on S1, then an event, then the copy
    syncs.record_state(9, S1)
    _copy(tracker, syncs, buf, seq=2)
    if sync == "other_stream":
        syncs.update_seq_num(S0, 3)
        syncs.all_streams_wait_for_stream(S0)
    else:
        syncs.all_streams_wait_for_event(9)
    tracker.host_synced(lambda: ("s.py", 1))
    _host(tracker, buf)
    assert len(log.events()) == 1


def test_copies_on_two_streams_need_ordering():
    tracker, syncs, log = _tracker()
    buf = torch.zeros(64)
    _copy(tracker, syncs, buf, stream=S1, seq=1, writes_host=True)  # D2H into buf on S1
    _copy(tracker, syncs, buf, stream=S0, seq=2, pending=False)  # H2D out of buf on S0
    (ev,) = log.events()
    assert ev.streams == (S0, S1) and "nothing orders them" in ev.what
    tracker2, syncs2, log2 = _tracker()
    _copy(tracker2, syncs2, buf, stream=S1, seq=1, writes_host=True)
    syncs2.create_event(4)
    syncs2.record_state(4, S1)
    syncs2.stream_wait_for_event(S0, 4)
    _copy(tracker2, syncs2, buf, stream=S0, seq=2, pending=False)
    assert log2.events() == []


def test_unseen_write_is_caught_by_checksum_at_the_next_sync():
    tracker, syncs, log = _tracker()
    buf = torch.zeros(1024)
    _copy(tracker, syncs, buf)
    buf.numpy()[5] = 1.0  # a write the dispatcher never sees
    syncs.all_streams_wait_for_stream(S1)
    tracker.host_synced(lambda: ("sync.py", 7))
    (ev,) = log.events()
    assert ev.ops == ("<unseen host write>", "aten::copy_")
    assert ev.sites == ("sync.py:7", "copy.py:10") and "at the host sync" in ev.what


def test_unchanged_bytes_seen_write_and_size_limit_do_not_double_report():
    tracker, syncs, log = _tracker()
    a, b = torch.zeros(64), torch.zeros(64)
    _copy(tracker, syncs, a)
    _copy(tracker, syncs, b)
    _host(tracker, b)  # seen by dispatch: reported once...
    b.numpy()[0] = 3.0  # ...and its changed bytes are not reported again
    syncs.all_streams_wait_for_stream(S1)
    tracker.host_synced(lambda: ("sync.py", 7))
    assert [e.ops[0] for e in log.events()] == ["aten::add_"]
    small = PinnedTracker(san.StreamSynchronizations(), pinned._Races(), checksum_max_bytes=16)
    c = torch.zeros(64)
    small.syncs.update_seq_num(S1, 1)
    small.device_access(*byte_range(c), stream=S1, seq=1, writes_host=False, op="aten::copy_",
                        site=lambda: ("c.py", 1), tensor="t", data_ptr=c.data_ptr(),
                        pending=True, lifetime=c)
    assert small.pending[0].checksum is None  # over the limit: not checksummed


def test_finish_checks_copies_no_sync_covered():
    tracker, syncs, log = _tracker()
    buf = torch.zeros(64)
    _copy(tracker, syncs, buf)
    buf.numpy()[:] = 2.0
    tracker.finish(lambda: ("end.py", 3))
    (ev,) = log.events()
    assert "end of the region" in ev.what and tracker.pending == []


def test_entry_dies_with_its_storage():
    tracker, syncs, log = _tracker()
    buf = torch.zeros(64)
    view = buf[8:]
    _copy(tracker, syncs, view)
    del buf
    gc.collect()
    assert len(tracker.pending) == 1  # the view still holds the storage
    del view
    gc.collect()
    assert tracker.pending == []


def test_byte_range():
    t = torch.zeros(4, 6)
    assert byte_range(t) == (t.data_ptr(), t.data_ptr() + 96)
    col = t[:, 2]
    assert byte_range(col) == (col.data_ptr(), col.data_ptr() + (3 * 6 + 1) * 4)
    assert byte_range(t.t()) == byte_range(t)
    assert byte_range(torch.zeros(0)) is None


# ---------------------------------------------------------------------------------------------
# the dispatch path on CPU: real mode and classification, FAKE copy observations injected

def test_dispatch_classifies_host_ops_on_a_tracked_buffer():
    import torch.cuda._gpu_trace as gpu_trace

    buf = torch.zeros(512)
    other = torch.zeros(512)
    dst = torch.zeros(16)
    det = RaceDetector(_assume_cuda=True)
    det.start()
    try:
        syncs = det._handler.syncs
        _copy(det._tracker, syncs, buf)  # FAKE: a non-blocking H2D copy out of buf on S1
        _copy(det._tracker, syncs, dst, writes_host=True)  # FAKE: a D2H copy into dst on S1
        buf.view(2, 256)  # a view: metadata only
        dst.view(4, 4).t()  # views of an unfinished D2H destination touch no bytes either
        dst.is_pinned()
        torch.empty_like(dst)
        buf.sum()  # read of a copy source: fine
        other.add_(1)  # other bytes
        torch.add(other, 1, out=other)
        buf.add_(1)  # HW1
        torch.mul(other[:4], 2, out=buf[:4])  # HW2
        dst.max()  # HR3
        gpu_trace.StreamSynchronizationCallbacks.fire_callbacks(S1)  # FAKE trace: host synced S1
        buf.add_(1)  # after the sync: fine
        dst.max()
    finally:
        found = det.stop()
    assert [(e.ops[0], e.sites[0]) for e in found] == [
        ("aten::add_", _site("HW1")), ("aten::mul", _site("HW2")), ("aten::max", _site("HR3"))]
    assert all(e.sites[1] == "copy.py:10" and e.streams == (S1,) for e in found)
    assert "host read" in found[2].what
    assert found[0].tensor == f"shape (512,) float32 @0x{buf.data_ptr():x}"


def test_one_host_write_over_two_unfinished_copies_counts_once():
    tracker, syncs, log = _tracker()
    buf = torch.zeros(64)
    _copy(tracker, syncs, buf, seq=1)
    _copy(tracker, syncs, buf, seq=2)  # same copy site again, still unfinished
    _host(tracker, buf)
    _host(tracker, buf)
    (ev,) = log.events()
    assert ev.what.endswith("(seen 2 times)")


def test_trace_sync_callback_runs_the_checksum_check():
    import torch.cuda._gpu_trace as gpu_trace

    buf = torch.zeros(256)
    det = RaceDetector(_assume_cuda=True)
    det.start()
    try:
        _copy(det._tracker, det._handler.syncs, buf)  # FAKE: a non-blocking H2D copy out of buf
        buf.numpy()[3] = 7.0  # unseen by the dispatcher
        gpu_trace.StreamSynchronizationCallbacks.fire_callbacks(S1)  # SYNC (FAKE trace)
        assert det._tracker.pending == []
    finally:
        found = det.stop()
    assert [(e.ops, e.sites[0]) for e in found] == [
        (("<unseen host write>", "aten::copy_"), _site("SYNC (FAKE trace)"))]


def test_the_lasting_trace_hook_is_said_once_by_the_detector_that_armed_it(monkeypatch):
    """FAKE (_assume_cuda, CPU): a fresh hub (as in a new process) installs torch's CUDA trace,
    which torch cannot deactivate; the first detector says so in its notes, later ones do not."""
    monkeypatch.setattr(races, "_HUB", races._Hub())
    first, second = RaceDetector(_assume_cuda=True), RaceDetector(_assume_cuda=True)
    first.start()
    first.stop()
    second.start()
    second.stop()
    assert [n for n in first.notes if "cannot be undone" in n] == [races.LASTING_NOTE]
    assert not any("cannot be undone" in n for n in second.notes)
