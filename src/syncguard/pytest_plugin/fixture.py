"""The ``syncguard`` fixture's object: guard part of a test body, record measurements.

Imported by plugin.py's fixture function only when a test asks for the fixture, so that a run
that never uses it does not load the regions.
"""
from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

import pytest

from syncguard.attribution.codescope import split_list
from syncguard.pytest_plugin import options
from syncguard.regions.region import allow, audit, forbid

if TYPE_CHECKING:
    from syncguard.pytest_plugin.session import SyncguardSession


class SyncguardFixture:
    """The ``syncguard`` fixture: guard part of a test body, record measurements."""

    def __init__(self, item: pytest.Item, settings: options.Settings,
                 session: SyncguardSession | None = None):
        state = None
        if session is not None:  # only a session's tests have a state (session.py is loaded)
            from syncguard.pytest_plugin.session import STATE

            state = item.stash.get(STATE, None)
        self._state, self._session = state, session
        plan = state.plan if state else None
        self.detectors = plan.detectors if plan else settings.detectors
        self.races = plan.races if plan else settings.races
        self.mode = plan.mode if plan else settings.mode
        self.fail_on_phase = plan.fail_on_phase if plan else settings.fail_on_phase
        self._measurements = state.measurements if state else {}
        self._own_regions = state.own_regions if state else []

    def forbid(self, detectors=None, *, races=None):
        """A ``forbid()`` block; once a test opens one (or an ``audit()``) through the fixture,
        its blocks are what the plugin reports and judges, not the whole call phase."""
        return self._tracked(forbid(detectors or self.detectors,
                                    races=self.races if races is None else races,
                                    fail_on_phases=self.fail_on_phase))

    def audit(self, detectors=None, *, races=None):
        return self._tracked(audit(detectors or self.detectors,
                                   races=self.races if races is None else races,
                                   fail_on_phases=self.fail_on_phase))

    @contextlib.contextmanager
    def _tracked(self, region):
        with region as report:
            self._own_regions.append(report)
            yield report

    def set_scope(self, *paths: str, ignore: str | tuple[str, ...] = ()) -> None:
        """Judge this test's syncs by another code scope (as ``--syncguard-scope``/``-ignore``;
        no paths: the session's scope with ``ignore`` added). Takes effect for the whole call
        phase, as the judging happens when it ends."""
        if self._state is None or self._session is None:
            return  # not audited: there is nothing to judge
        settings = self._session.settings
        scope = split_list(paths) or settings.scope
        ignored = tuple(settings.ignore) + split_list(ignore)
        self._state.codescope = self._session.scope_for(scope, ignored, "syncguard.set_scope")

    def allow(self, reason: str, **kw):
        return allow(reason, **kw)

    def record(self, name: str, value: Any) -> None:
        """Store a JSON value under the test's ``measurements`` in the report."""
        try:
            json.dumps(value, allow_nan=False)  # NaN and Infinity are not JSON: no reader takes them
        except ValueError:
            raise ValueError(f"syncguard.record({name!r}, ...): {value!r} holds NaN or Infinity, "
                             "which JSON cannot store") from None
        except TypeError:
            raise TypeError(f"syncguard.record({name!r}, ...): {type(value).__name__} is not JSON "
                            "serialisable") from None
        self._measurements[str(name)] = value

    @property
    def measurements(self) -> dict[str, Any]:
        return dict(self._measurements)

