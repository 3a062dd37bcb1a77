"""Sticky CUDA errors: a device-side assert spoils its process's CUDA context for every later test.

Why this module: after such an error every later CUDA call in the process fails, so later tests
would fail for a reason that is not theirs. syncguard names the culprit instead: serially the
later audited tests fail with its name, under xdist the worker ends before its next test and xdist
starts a fresh one, and with ``--syncguard-isolate`` only the culprit's own child is affected.
"""
from __future__ import annotations

import contextlib
import os
import sys

import pytest

POISON_MARKS = ("device-side assert", "CUDA error", "illegal memory access",
                "unspecified launch failure", "misaligned address")


def sticky_error() -> str | None:
    """A sticky CUDA error in this process's context, or None. Never initialises CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as e:  # RuntimeError, torch.AcceleratorError
        msg = str(e).strip()
        if any(p in msg for p in POISON_MARKS):
            return msg.splitlines()[0] if msg else type(e).__name__
    return None


class PoisonGuard:
    """Registered as a plugin next to the session: remembers the culprit, ends poisoned workers."""

    def __init__(self, config: pytest.Config, is_worker: bool, is_child: bool):
        self.config = config
        self.is_worker, self.is_child = is_worker, is_child
        self.poisoned_by: tuple[str, str] | None = None  # (culprit nodeid, error)
        self.ended_workers: dict[str, tuple[str, str]] = {}  # xdist controller: worker -> culprit

    def check(self, nodeid: str) -> str | None:
        """After a test: the sticky error it left, remembered as this process's culprit."""
        error = sticky_error()
        if error:
            self.poisoned_by = (nodeid, error)
        return error

    def refuse_if_poisoned(self) -> None:
        """Before an audited test: fail it, naming the culprit, if the context is spoilt."""
        if self.poisoned_by is not None:
            culprit, msg = self.poisoned_by
            pytest.fail(f"syncguard: not run: the CUDA context of this process was poisoned by "
                        f"{culprit} ({msg}); run with --syncguard-isolate or pytest-xdist to keep "
                        "later GPU tests meaningful", pytrace=False)

    def text(self, error: str) -> str:
        then = ("it ran in its own subprocess (--syncguard-isolate), so no other test is affected"
                if self.is_child else
                "this worker ends before its next test and a fresh one takes over" if self.is_worker
                else "later GPU tests in this process are reported as errors naming this test; use "
                     "--syncguard-isolate or pytest-xdist to keep them meaningful")
        return f"syncguard: this test left the CUDA context poisoned ({error}); {then}"

    def worker_ended(self, worker: str, culprit: str, error: str) -> None:
        """xdist controller: ``worker`` reported a poisoning test and is about to exit."""
        self.ended_workers[worker] = (culprit, error)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> None:
        """A poisoned xdist worker exits before its next test, once the culprit is reported.

        Exiting only now (not right after the culprit) keeps the culprit's results whole: xdist
        has marked it complete, and the controller reschedules the untouched next test.
        """
        if self.is_worker and self.poisoned_by is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(3)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None)
        if worker not in self.ended_workers:
            return
        culprit, why = self.ended_workers.pop(worker)
        with contextlib.suppress(NotImplementedError):  # loadscope re-queues unfinished work itself
            sched.mark_test_pending(crashitem)
        report.outcome = "rescheduled"  # neither failed nor passed: not counted, shown in a line
        report.syncguard_rescheduled = (
            f"syncguard: ended worker {worker} after {culprit} poisoned its CUDA context ({why}); "
            f"{crashitem} was not started there and runs on a fresh worker")
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(report.syncguard_rescheduled)

    def pytest_report_teststatus(self, report):
        if getattr(report, "syncguard_rescheduled", None):
            return "", "", ""  # a test syncguard moved to a fresh worker; its real result follows
        return None
