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

Whether to predict is decided here too, once per process (:func:`decide`), by the early hook
and the session alike: ``--syncguard-predict=on`` or ``off`` as given; ``auto`` (the default)
predicts where this machine has no CUDA, asked the way that initialises no CUDA on a GPU
machine (:func:`cuda_devices`), so that a GPU machine measures as before and a CPU one predicts
instead of reporting every test "not audited (no CUDA)".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ContextManager

import pytest

_BLOCK = pytest.StashKey["ContextManager[Any]"]()
_TARGET = pytest.StashKey[str]()  # the torch version the session's block predicts for
_DECISIONS = pytest.StashKey["dict[tuple, Decision]"]()

#: how each accepted value of --syncguard-predict (or its ini twin) reads; the booleans are
#: what the ini twin took before the option had three values
WORDS = {"on": "on", "off": "off", "auto": "auto", "true": "on", "yes": "on", "1": "on",
         "false": "off", "no": "off", "0": "off"}


def word(value: Any) -> str | None:
    """``on``, ``off`` or ``auto`` for an accepted value (True/False too), else None."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return WORDS.get(str(value).strip().lower()) if isinstance(value, str) else None


@dataclass(frozen=True)
class Decision:
    """Whether this process predicts, and why, in words the summary shows."""

    predict: bool
    why: str


def cuda_devices() -> int:
    """The availability probe: how many CUDA devices torch sees. ``torch.cuda.device_count()``
    asks NVML first, so on a GPU machine it neither initialises CUDA nor fixes the visible
    devices (an xdist worker picks its own later, devices.py); a CPU build answers 0. Tests of
    ``auto`` on a GPU machine replace this function."""
    import torch

    return torch.cuda.device_count()


def decide(config: pytest.Config, asked: str, enabled: bool, detectors_named: bool
           ) -> Decision:
    """Whether to predict: ``asked`` (``on``/``off``/``auto``) with syncguard ``enabled`` for
    the session and detectors named or not. Decided once per process for the same inputs, so
    the early hook and the session agree; the probe runs only for ``auto``."""
    decisions = config.stash.setdefault(_DECISIONS, {})
    key = (asked, enabled, detectors_named)
    if key not in decisions:
        decisions[key] = _decide(asked, enabled, detectors_named)
    return decisions[key]


def _decide(asked: str, enabled: bool, detectors_named: bool) -> Decision:
    if asked != "auto":
        return Decision(asked == "on", f"--syncguard-predict={asked}")
    if not enabled:
        return Decision(False, "auto: syncguard is not on for the session")
    if detectors_named:
        return Decision(False, "auto: detectors were named, so they measure "
                               "(--syncguard-predict=on predicts)")
    try:
        n = cuda_devices()
    except ImportError:
        return Decision(False, "auto: torch is not installed")
    if n:
        return Decision(False, f"auto: this machine has CUDA ({n} device(s)), so it measures")
    return Decision(True, "auto: this machine has no CUDA")


def early_decision(early_config: pytest.Config) -> Decision | None:
    """The decision from what the command line and ini say before conftests are imported
    (declare.early_values); None where syncguard is off or the value is bad (the session
    refuses it later, naming it)."""
    from syncguard.pytest_plugin import declare

    enabled, raw, named = declare.early_values(early_config)
    asked = "auto" if raw is None else word(raw)
    if not enabled or asked is None:
        return None
    return decide(early_config, asked, enabled, named)


def open_block(config: pytest.Config) -> None:
    """Open the session's prediction block now, keep it for the session, and make sure the
    config closes it if the session never takes it."""
    if _BLOCK in config.stash:
        return
    from syncguard.pytest_plugin.declare import predict_torch_asked
    from syncguard.predict import predicting
    from syncguard.predict.rules import version_tuple

    target = predict_torch_asked(config)
    try:
        version_tuple(target) if target else None
    except ValueError:
        target = None  # the session refuses it, naming where it was given
    block = predicting(target)
    config.stash[_TARGET] = block.__enter__().target
    config.stash[_BLOCK] = block
    config.add_cleanup(lambda: close(config))


def adopt(config: pytest.Config) -> ContextManager[Any] | None:
    """The open block, handed to its new owner (who must ``__exit__`` it), or None."""
    block = config.stash.get(_BLOCK, None)
    if block is not None:
        del config.stash[_BLOCK]
    return block


def target(config: pytest.Config) -> str | None:
    """The torch version the session's block predicts for (None before one opened)."""
    return config.stash.get(_TARGET, None)


def nearest_rules(target: str | None) -> str | None:
    """The measured torch version whose rules the table uses for ``target`` where a rule was
    measured on several (its nearest; rules.RuleTable.nearest)."""
    if target is None:
        return None
    from syncguard.predict.rules import load_rules

    table = load_rules()
    return table.nearest(table.versions, target)


def close(config: pytest.Config) -> None:
    """Close the block if nobody adopted it (a no-op once it is closed or adopted)."""
    block = adopt(config)
    if block is not None:
        block.__exit__(None, None, None)
