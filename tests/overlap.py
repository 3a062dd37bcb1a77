"""Two threads whose blocks overlap in one forced order, for the tests of process-wide state
that blocks share by reference count (the prediction shim): A opens, B opens, A closes, B asks,
B closes. Events, not sleeps, force the order."""
from __future__ import annotations

import threading
from typing import Any, Callable, ContextManager


def overlapping(block: Callable[[], ContextManager], ask: Callable[[], Any]) -> Any:
    """What ``ask()`` returned inside B's block after A's had closed; a failure on either
    thread is raised here."""
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
    seen, errors = [], []

    def a():
        try:
            with block():
                a_open.set()
                assert b_open.wait(10)
        except BaseException as e:  # pragma: no cover - raised below
            errors.append(e)
        finally:
            a_closed.set()

    def b():
        try:
            assert a_open.wait(10)
            with block():
                b_open.set()
                assert a_closed.wait(10)
                seen.append(ask())
        except BaseException as e:  # pragma: no cover - raised below
            errors.append(e)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    assert seen, "thread B never asked (a thread is stuck)"
    return seen[0]
