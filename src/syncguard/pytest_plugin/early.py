"""The session's ``predicting()`` block, opened before the first conftest is imported.

Why early: many suites read ``torch.cuda.is_available()`` while pytest imports their root
``conftest.py`` (a module global, a ``skipif`` built at import), which happens before any
``pytest_configure``. Opened there, prediction answers those reads as one GPU would, so the
suite's CUDA tests run (and are predicted) instead of skipping.

One owner of the block at a time: plugin.py opens it in ``pytest_load_initial_conftests`` and
keeps it in the config's stash; the session takes it over (:func:`adopt`) and closes it at
``pytest_unconfigure``; a block nobody adopted (the session never came up, or refused a bad
setting) is closed by the config's cleanup. :func:`close` runs at most once per block, so
``torch.cuda`` is always put back.
"""
from __future__ import annotations

from typing import Any, ContextManager

import pytest

_BLOCK = pytest.StashKey["ContextManager[Any]"]()


def open_block(config: pytest.Config) -> None:
    """Open the session's prediction block now, keep it for the session, and make sure the
    config closes it if the session never takes it."""
    if _BLOCK in config.stash:
        return
    from syncguard.predict import predicting

    block = predicting()
    block.__enter__()
    config.stash[_BLOCK] = block
    config.add_cleanup(lambda: close(config))


def adopt(config: pytest.Config) -> ContextManager[Any] | None:
    """The open block, handed to its new owner (who must ``__exit__`` it), or None."""
    block = config.stash.get(_BLOCK, None)
    if block is not None:
        del config.stash[_BLOCK]
    return block


def close(config: pytest.Config) -> None:
    """Close the block if nobody adopted it (a no-op once it is closed or adopted)."""
    block = adopt(config)
    if block is not None:
        block.__exit__(None, None, None)
