"""The plugin's options, ini keys and markers as pytest shows them: names, help, defaults.

Loaded in every pytest run of a venv where syncguard is installed, so it imports nothing of
syncguard's: turning the values into settings (and checking them) is options.py's, imported only
by a run that uses syncguard. Adding an option touches this table, its parser in options.py and
the :class:`options.Settings` field of the same name.
"""
from __future__ import annotations

import argparse
import warnings
from typing import Any

import pytest

#: the detectors a region uses when none are named; the same tuple as
#: ``syncguard.records.events.DETECTORS`` (kept here so that declaring options imports nothing)
DEFAULT_DETECTORS = ("auto",)

MARKERS = (
    "syncguard(mode=None, detectors=None, races=None, fail_on_phase=None, scope=None, "
    "ignore=None): audit this test even without --syncguard, optionally overriding the "
    "session's options",
    "allow_sync(reason, max=None, api=None, kind=None): accept matching syncs in this test; "
    "reason is required",
    "no_syncguard: never audit this test",
)

#: markers that make the session come up for a test even without --syncguard: options.plan_for
#: audits a test with a ``syncguard`` marker and checks every ``allow_sync`` marker's arguments
SESSION_MARKERS = ("syncguard", "allow_sync")

#: (flag, dest, default, argparse keywords, help). The ini twin is named ``dest``.
DECLARED: tuple[tuple[str, str, Any, dict, str], ...] = (
    ("--syncguard", "syncguard", False, dict(action="store_true", default=None),
     "audit every test's call phase for host<->device syncs"),
    ("--syncguard-mode", "syncguard_mode", "fail", dict(metavar="fail|warn|record"),
     "on a sync: fail the test, emit a SyncguardWarning, or only record"),
    ("--syncguard-detectors", "syncguard_detectors", DEFAULT_DETECTORS,
     dict(metavar="LIST"), "comma-separated detectors"),
    ("--syncguard-races", "syncguard_races", False, dict(action="store_true", default=None),
     "also look for cross-stream races"),
    ("--syncguard-report", "syncguard_report", None, dict(metavar="PATH"),
     "write the session's JSON report to PATH"),
    ("--syncguard-isolate", "syncguard_isolate", False,
     dict(action="store_true", default=None),
     "run each audited test in a fresh subprocess (survives sticky CUDA errors; without CUDA "
     "tests run in this process)"),
    ("--syncguard-require-cuda", "syncguard_require_cuda", False,
     dict(action="store_true", default=None),
     "fail the session when no test could be audited, or under --syncguard-predict when "
     "nothing was predicted (a CI gate that cannot be silently green)"),
    ("--syncguard-fail-on-phase", "syncguard_fail_on_phase", (),
     dict(metavar="LIST"), "comma-separated phases (compile, graph_capture) whose syncs fail a "
     "test too; otherwise they are shown, not failing"),
    ("--syncguard-scope", "syncguard_scope", (), dict(metavar="PATH_OR_PACKAGE[,...]"),
     "only syncs with a frame inside these paths/packages count against a test; others are "
     "reported as outside scope ('*': every sync counts; none given: src/ or the top-level "
     "packages under rootdir, without test files and conftest.py)"),
    ("--syncguard-ignore", "syncguard_ignore", (), dict(metavar="PATH[,...]"),
     "leave these paths (e.g. test utilities) out of the scope"),
    ("--syncguard-keep-events", "syncguard_keep_events", False,
     dict(action="store_true", default=None),
     "also store every sync event in the report (debugging; reports grow with events)"),
    ("--syncguard-max-stacks", "syncguard_max_stacks", 5000, dict(metavar="N"),
     "site records that keep their first stack in the report"),
    ("--syncguard-predict", "syncguard_predict", "auto",
     dict(nargs="?", const="on", metavar="on|off|auto"),
     "predict syncs on the CPU (CUDA tensors become CPU stand-ins; rules measured on a GPU) "
     "instead of measuring them: on, off, or auto (predict where this machine has no CUDA and "
     "no detector is named; measure where it has CUDA); a bare --syncguard-predict means on. "
     "Predicted syncs fail a test only with --syncguard-mode=fail given explicitly, otherwise "
     "they are recorded"),
    ("--syncguard-predict-torch", "syncguard_predict_torch", None, dict(metavar="X.Y"),
     "predict for this torch version (the one your GPU CI runs), from the rules of the nearest "
     "measured version, which every predicted sync names (default: the running torch)"),
)

#: ini keys with no command-line twin
INI_ONLY = ("syncguard_warmup",)


def default_text(default: Any) -> str:
    """How ``--help`` shows a default."""
    if isinstance(default, tuple):
        return ",".join(default) or "none"
    return "off" if default in (False, None) else str(default)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("syncguard", "CUDA host<->device sync auditing")
    for flag, dest, default, kw, help_ in DECLARED:
        text = f"{help_} (default: {default_text(default)})"
        group.addoption(flag, dest=dest, help=text, **kw)
        # a list option is declared one: pytest then takes a TOML list as it is (a 'string'
        # option warns that it will refuse one) and an ini string as lines, each split at commas
        listed = isinstance(default, tuple)
        parser.addini(dest, f"{text} [ini twin of {flag}]", type="linelist" if listed else None,
                      default=[] if listed else "")
    parser.addini("syncguard_warmup", "module:callable run once per process before the first "
                  "audited test, after syncguard's own CUDA warm-up (an alias of the "
                  "pytest_syncguard_warmup hook)", default="")
    group.addoption("--syncguard-child", dest="syncguard_child", help=argparse.SUPPRESS)


def raw_ini(config: pytest.Config, dest: str) -> Any:
    """``config.getini(dest)`` without pytest's warning about a TOML list handed to a one-value
    key: syncguard refuses such a list itself, naming the key (options.resolve_settings), where
    the warning was a second message about it, and under ``-W error`` an INTERNALERROR instead
    of the refusal."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Passing a value that is not a string",
                                pytest.PytestRemovedIn10Warning)
        return config.getini(dest)


def anything_given(config: pytest.Config) -> bool:
    """Whether any syncguard option or ini key was given a value (a bad one included: the
    session checks it and names it). Cheap: reads the parsed options and the ini only."""
    if config.getoption("syncguard_child", None) is not None:
        return True
    for _, dest, _, _, _ in DECLARED:
        if config.getoption(dest, None) is not None:
            return True
    for dest in [d for _, d, _, _, _ in DECLARED] + list(INI_ONLY):
        raw = raw_ini(config, dest)
        if raw not in ("", [], None) and not (isinstance(raw, str) and not raw.strip()):
            return True
    return False


def wants_session(item: pytest.Item) -> bool:
    """Whether a collected test carries a marker that the session must see (SESSION_MARKERS)."""
    return any(item.get_closest_marker(name) is not None for name in SESSION_MARKERS)


def early_values(early_config: pytest.Config) -> tuple[bool, Any, bool]:
    """What the early prediction decision (pytest_plugin/early.py) reads, before the command line
    is fully parsed (``pytest_load_initial_conftests``): whether syncguard is on (``--syncguard``
    or ``syncguard = true``), the raw ``--syncguard-predict`` value (or its ini twin's; None when
    neither is given) and whether detectors were named (``--syncguard-detectors`` or its ini
    twin). The command line from the known-args namespace, the ini as usual. A syncguard value
    that is not a boolean reads off here; the session refuses it later, naming it."""
    known = getattr(early_config, "known_args_namespace", None) or early_config.option

    def raw(dest: str) -> Any:
        cli = getattr(known, dest, None)
        if cli is not None:
            return cli
        value = raw_ini(early_config, dest)
        if isinstance(value, str):
            return value.strip() or None
        return value or None  # a TOML list, or an empty linelist

    on = raw("syncguard")
    on = on if isinstance(on, bool) else str(on).strip().lower() in ("1", "true", "yes", "on")
    return on, raw("syncguard_predict"), raw("syncguard_detectors") is not None


def predict_torch_asked(early_config: pytest.Config) -> str | None:
    """``--syncguard-predict-torch`` (or its ini twin) as given, read as early as
    :func:`early_values`; None when not given. Unchecked here: the session checks it."""
    known = getattr(early_config, "known_args_namespace", None) or early_config.option
    value = getattr(known, "syncguard_predict_torch", None)
    if value is None:
        raw = raw_ini(early_config, "syncguard_predict_torch")
        value = raw.strip() if isinstance(raw, str) and raw.strip() else None
    return value
