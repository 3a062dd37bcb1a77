"""Worker -> GPU assignment. Device counts are faked (plain ints); no GPU is touched."""
from __future__ import annotations

import pytest

from syncguard.pytest_plugin.devices import current_worker_id, device_for_worker, worker_index


@pytest.mark.parametrize("count, expected", [
    (1, [0, 0, 0, 0, 0]),
    (2, [0, 1, 0, 1, 0]),
    (4, [0, 1, 2, 3, 0]),
    (8, [0, 1, 2, 3, 4]),
])
def test_round_robin(count, expected):
    assert [device_for_worker(f"gw{i}", count) for i in range(5)] == expected


def test_every_device_used_once_when_workers_equal_devices():
    assert sorted(device_for_worker(f"gw{i}", 8) for i in range(8)) == list(range(8))


@pytest.mark.parametrize("worker", [None, "", "master"])
def test_serial_run_leaves_device_alone(worker):
    assert device_for_worker(worker, 4) is None


def test_no_devices_means_no_assignment():
    assert device_for_worker("gw3", 0) is None


@pytest.mark.parametrize("bad", ["gw", "worker1", "gw-1", "gw1a"])
def test_malformed_worker_id_is_named(bad):
    with pytest.raises(ValueError, match=repr(bad).replace("[", r"\[")):
        worker_index(bad)


@pytest.mark.parametrize("bad", [-1, 1.0, True, "2"])
def test_bad_device_count(bad):
    with pytest.raises(ValueError, match="device_count"):
        device_for_worker("gw0", bad)


def test_worker_id_from_environment(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    assert current_worker_id() == "gw5"
    assert device_for_worker(current_worker_id(), 2) == 1
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert current_worker_id() is None
