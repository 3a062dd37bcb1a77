"""The plugin's settings and markers: parsed once, validated with the source named.

Every ``--syncguard-*`` option has a ``syncguard_*`` ini twin; the command line wins, then the
ini, then the default. Markers are parsed by calling real functions with the marker's arguments,
so a bad marker fails at collection with the same message Python would give. The options are
declared (names, help, defaults) in declare.py, which every pytest run loads; this module, which
imports what checking needs, is loaded only by a run that uses syncguard.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable

import pytest

from syncguard.attribution.codescope import split_list
from syncguard.attribution.phases import parse_phases
from syncguard.pytest_plugin import declare
from syncguard.pytest_plugin.declare import MARKERS, add_options  # noqa: F401  (used from here)
from syncguard.pytest_plugin.declare import default_text as _default_text  # noqa: F401
from syncguard.records.events import DETECTORS as DEFAULT_DETECTORS
from syncguard.regions.region import allow, parse_detectors

MODES = ("fail", "warn", "record")


@dataclass(frozen=True)
class Settings:
    """The session's options after command line, ini and defaults are resolved."""

    enabled: bool = False
    mode: str = "fail"
    detectors: tuple[str, ...] = DEFAULT_DETECTORS
    races: bool = False
    report: str | None = None
    isolate: bool = False
    require_cuda: bool = False
    fail_on_phase: tuple[str, ...] = ()
    warmup: str | None = None  # ini alias of the pytest_syncguard_warmup hook
    child: str | None = None  # internal: this process is an --syncguard-isolate child
    scope: tuple[str, ...] = ()  # paths or packages; () = the default scope (codescope.py)
    ignore: tuple[str, ...] = ()
    keep_events: bool = False
    max_stacks: int = 5000
    predict: bool = False  # predict syncs on CPU stand-ins (syncguard.predict), no GPU needed
    #: why the session predicts or not (early.Decision.why): ``--syncguard-predict=on``/``off``
    #: as given, or what ``auto`` found
    predict_why: str | None = None
    predict_torch: str | None = None  # the torch to predict for (default: the running one)

    def options(self) -> dict[str, Any]:
        """What the session report records under ``options``."""
        out = {"mode": self.mode, "detectors": list(self.detectors), "races": self.races,
               "isolate": self.isolate, "require_cuda": self.require_cuda,
               "fail_on_phase": list(self.fail_on_phase), "keep_events": self.keep_events,
               "max_stacks": self.max_stacks, "predict": self.predict,
               **({"predict_why": self.predict_why} if self.predict_why else {})}
        if self.predict_torch:  # written only where given: older readers see the same keys
            out["predict_torch"] = self.predict_torch
        return out


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(f"{where}: {value!r} is not a boolean (true/false)")


def _mode(value: Any, where: str) -> str:
    if value not in MODES:
        raise ValueError(f"{where}: {value!r} is not one of {', '.join(MODES)}")
    return value


def _predict(value: Any, where: str) -> str:
    from syncguard.pytest_plugin import early

    found = early.word(value)
    if found is None:
        raise ValueError(f"{where}: {value!r} is not one of on, off, auto (a bare "
                         "--syncguard-predict takes the word after it: write "
                         "--syncguard-predict=on)")
    return found


def _warmup(value: Any, where: str) -> str:
    module, sep, attr = str(value).partition(":")
    if not sep or not module.strip() or not attr.strip():
        raise ValueError(f"{where}: {value!r} is not of the form 'module:callable'")
    return str(value).strip()


def _torch_version(value: Any, where: str) -> str:
    text = str(value).strip()
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
        raise ValueError(f"{where}: {value!r} is not a torch version (X.Y or X.Y.Z, e.g. 2.11)")
    return text


def _path(value: Any, where: str) -> str:
    return os.path.expanduser(str(value))  # "~/r.json" is the home's, as a shell would have it


def _list(value: Any, where: str) -> tuple[str, ...]:
    items = split_list(value)
    if not items:
        # the ini hands over a list of its lines (a 'linelist' option): one line is shown as
        # the text that was written, not as a list nobody wrote
        shown = value[0] if isinstance(value, list) and len(value) == 1 else value
        raise ValueError(f"{where}: {shown!r} names no path or package")
    return items


def _count(value: Any, where: str) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"{where}: {value!r} is not a whole number >= 0")
    return n


#: how each option's raw value is parsed and checked, by ``dest``
CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "syncguard": _bool, "syncguard_mode": _mode, "syncguard_detectors": parse_detectors,
    "syncguard_races": _bool, "syncguard_report": _path, "syncguard_isolate": _bool,
    "syncguard_require_cuda": _bool, "syncguard_fail_on_phase": parse_phases,
    "syncguard_scope": _list, "syncguard_ignore": _list, "syncguard_keep_events": _bool,
    "syncguard_max_stacks": _count, "syncguard_predict": _predict,
    "syncguard_predict_torch": _torch_version,
}

#: (flag, dest, parser, default, argparse keywords, help): declare.DECLARED with each parser.
#: The ini twin is named ``dest``.
OPTIONS: tuple[tuple[str, str, Callable[[Any, str], Any], Any, dict, str], ...] = tuple(
    (flag, dest, CHECKS[dest], default, kw, help_)
    for flag, dest, default, kw, help_ in declare.DECLARED)


def settings_field(dest: str) -> str:
    """The :class:`Settings` field an option's ``dest`` sets (``syncguard_mode`` -> ``mode``)."""
    return "enabled" if dest == "syncguard" else dest[len("syncguard_"):]


def command_line(settings: Settings, skip: tuple[str, ...] = ()) -> list[str]:
    """Options that give another pytest process reading the same ini these settings: one per
    :data:`OPTIONS` entry not in ``skip`` (dests), its value given explicitly (the command line
    wins over the ini), except a false switch, an empty list and None, which no flag can say and
    which the same ini resolves the same way. ``--syncguard-predict`` is given as this process
    decided it (``on`` or ``off``), never ``auto``: the child does not decide again.

    Why: an ``--syncguard-isolate`` child must judge its test by the parent's rules, every one of
    them. Built from the table, so an option added there travels too."""
    out = []
    for flag, dest, _, _, kw, _ in OPTIONS:
        value = getattr(settings, settings_field(dest))
        switch = kw.get("action") == "store_true"
        if dest in skip or (value is False and switch) or value is None or value == ():
            continue  # (0 is a value)
        if switch:
            out.append(flag)
        elif isinstance(value, bool):  # a resolved choice: --syncguard-predict
            out.append(f"{flag}={'on' if value else 'off'}")
        elif isinstance(value, tuple):
            out.append(f"{flag}={','.join(value)}")
        else:
            out.append(f"{flag}={value}")
    return out


def given(config: pytest.Config, dest: str) -> tuple[Any, str] | None:
    """The raw value an option was given and where: ``(value, where)`` from the command line,
    else from the ini (an ``-o``/``--override-ini`` value, or the ini file's), else None.

    ``where`` is what every message about a bad value starts with: the flag the user typed, or
    the ini key they wrote and the file it is in, never a flag they did not type (the scope and
    report checks that happen after the settings, session.py, name it too). A TOML list under
    ``[tool.pytest.ini_options]`` reaches here as a list and stays one: a list option reads it,
    any other refuses it."""
    cli = config.getoption(dest, None)
    if cli is not None:
        return cli, f"command line option --{dest.replace('_', '-')}"
    # a one-value option is declared a 'string' (no pytest type keeps a TOML list apart from an
    # ini string but that one), and pytest warns as it hands a list over (declare.raw_ini)
    raw = declare.raw_ini(config, dest)
    if isinstance(raw, list):
        return (raw, _ini_where(config, dest)) if raw else None
    if isinstance(raw, str) and raw.strip():
        return raw.strip(), _ini_where(config, dest)
    return None


def where(config: pytest.Config, dest: str) -> str:
    """How a message names the option ``dest`` (:func:`given`'s ``where``; the flag when the
    option was not given)."""
    found = given(config, dest)
    return found[1] if found else f"--{dest.replace('_', '-')}"


def _ini_where(config: pytest.Config, dest: str) -> str:
    overrides = getattr(config.option, "override_ini", None) or ()
    if any(str(o).partition("=")[0].strip() == dest for o in overrides):
        return f"ini option {dest} (-o/--override-ini)"
    return f"ini option {dest} ({config.inipath})" if config.inipath else f"ini option {dest}"


def resolve_settings(config: pytest.Config) -> Settings:
    """One place that turns options into Settings; raises pytest.UsageError for bad values,
    each naming where it came from (:func:`given`)."""
    def pick(dest: str, check: Callable[[Any, str], Any], default: Any) -> Any:
        found = given(config, dest)
        if found is None:
            return default
        value, where_ = found
        if isinstance(value, list) and not isinstance(default, tuple):
            raise ValueError(f"{where_}: {value!r} is a list, not one value")
        return check(value, where_)

    try:
        values = {dest: pick(dest, check, default) for _, dest, check, default, _, _ in OPTIONS}
        from syncguard.pytest_plugin import early

        decision = early.decide(config, values["syncguard_predict"], values["syncguard"],
                                given(config, "syncguard_detectors") is not None)
        mode, predict = values["syncguard_mode"], decision.predict
        if predict and pick("syncguard_mode", _mode, None) is None:
            mode = "record"  # a prediction fails a test only when fail mode is asked for
        return Settings(
            enabled=values["syncguard"], mode=mode, predict=predict, predict_why=decision.why,
            predict_torch=values["syncguard_predict_torch"],
            detectors=values["syncguard_detectors"], races=values["syncguard_races"],
            report=values["syncguard_report"], isolate=values["syncguard_isolate"],
            require_cuda=values["syncguard_require_cuda"],
            fail_on_phase=values["syncguard_fail_on_phase"],
            scope=values["syncguard_scope"], ignore=values["syncguard_ignore"],
            keep_events=values["syncguard_keep_events"], max_stacks=values["syncguard_max_stacks"],
            warmup=pick("syncguard_warmup", _warmup, None),
            child=config.getoption("syncguard_child", None),
        )
    except ValueError as e:
        raise pytest.UsageError(f"syncguard: {e}") from None


# ---------------------------------------------------------------------------------------------
# Markers -> a per-test plan.

@dataclass(frozen=True)
class AllowSpec:
    """One ``allow_sync`` marker, turned into an ``allow()`` block while the test runs."""

    reason: str
    max: int | None = None
    api: str | None = None
    kind: str | None = None

    def scope(self) -> allow:
        return allow(self.reason, max=self.max, api=self.api, kind=self.kind)


def syncguard_marker(*, mode: str | None = None, detectors: Any = None,
                     races: bool | None = None, fail_on_phase: Any = None, scope: Any = None,
                     ignore: Any = None) -> dict[str, Any]:
    """``@pytest.mark.syncguard(mode=, detectors=, races=, fail_on_phase=, scope=, ignore=)``: opt
    in, override (``scope``/``ignore``: as ``--syncguard-scope``/``--syncguard-ignore``)."""
    given = dict(mode=mode, detectors=detectors, races=races, fail_on_phase=fail_on_phase,
                 scope=scope, ignore=ignore)
    return {k: _MARKER_PARSERS[k](v, k) for k, v in given.items() if v is not None}


#: each keyword of the syncguard marker, parsed as its option is
_MARKER_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "mode": _mode, "detectors": parse_detectors, "races": _bool, "fail_on_phase": parse_phases,
    "scope": _list, "ignore": _list}


def allow_sync_marker(reason: str | None = None, *, max: int | None = None,
                      api: str | None = None, kind: str | None = None) -> AllowSpec:
    """``@pytest.mark.allow_sync(reason=..., max=None, api=None, kind=None)``."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("needs reason='why this sync is acceptable'")
    spec = AllowSpec(reason, max, api, kind)
    spec.scope()  # validates max, api and kind with allow()'s own messages
    return spec


@dataclass(frozen=True)
class Plan:
    """What syncguard does with one test."""

    audited: bool
    mode: str
    detectors: tuple[str, ...]
    races: bool
    fail_on_phase: tuple[str, ...] = ()
    allows: tuple[AllowSpec, ...] = ()
    reason: str | None = None  # why not audited
    scope: tuple[str, ...] = ()  # as Settings.scope; resolved by the session (codescope.resolve)
    ignore: tuple[str, ...] = ()


def plan_for(item: pytest.Item, settings: Settings) -> Plan | None:
    """What to do with one test; None when syncguard has nothing to say about it."""
    def parse(mark, fn):
        try:
            return fn(*mark.args, **mark.kwargs)
        except (TypeError, ValueError) as e:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{mark.name}: {e}") from None

    opts = {"mode": settings.mode, "detectors": settings.detectors, "races": settings.races,
            "fail_on_phase": settings.fail_on_phase, "scope": settings.scope,
            "ignore": settings.ignore}
    marks = list(item.iter_markers("syncguard"))
    for m in reversed(marks):  # closest marker wins
        opts.update(parse(m, syncguard_marker))
    if settings.predict:  # every region predicts; no GPU detector, no race detector
        opts.update(detectors=("predict",), races=False)
        if opts["mode"] == "fail" and settings.mode != "fail":  # a marker alone cannot make
            opts["mode"] = "record"                             # a prediction fail a test
    allows = tuple(parse(m, allow_sync_marker) for m in item.iter_markers("allow_sync"))
    if item.get_closest_marker("no_syncguard") is not None:
        return Plan(False, reason="no_syncguard marker", **opts) if settings.enabled else None
    if not (settings.enabled or marks):
        return None
    return Plan(True, allows=allows, **opts)
