"""options.py without a pytest run: marker arguments, the option table, defaults in --help."""
from __future__ import annotations

import dataclasses

import pytest

from syncguard.pytest_plugin import options
from syncguard.detectors.profiler import SYNC_APIS


def test_syncguard_marker_parses_and_validates():
    assert options.syncguard_marker() == {}
    assert options.syncguard_marker(mode="record", detectors="debug", races="yes",
                                    fail_on_phase="compile") == {
        "mode": "record", "detectors": ("debug",), "races": True, "fail_on_phase": ("compile",)}
    with pytest.raises(ValueError, match="mode: 'loud' is not one of fail, warn, record"):
        options.syncguard_marker(mode="loud")
    with pytest.raises(TypeError):
        options.syncguard_marker(moded="fail")


def test_allow_sync_marker_validates_reason_kind_and_api():
    spec = options.allow_sync_marker("readback", max=1, api="cudaMemcpyAsync",
                                     kind="blocking_copy_d2h")
    assert spec == options.AllowSpec("readback", 1, "cudaMemcpyAsync", "blocking_copy_d2h")
    for api in SYNC_APIS:
        assert options.allow_sync_marker("r", api=api).api == api
    with pytest.raises(ValueError, match="needs reason="):
        options.allow_sync_marker(" ")
    with pytest.raises(ValueError, match=r"allow\(api=\.\.\.\) must be one of .*, got 'cudaSync'"):
        options.allow_sync_marker("r", api="cudaSync")
    with pytest.raises(ValueError, match=r"allow\(kind=\.\.\.\) must be one of"):
        options.allow_sync_marker("r", kind="sideways")


def test_every_option_has_a_settings_field_and_a_shown_default():
    fields = {f.name: f.default for f in dataclasses.fields(options.Settings)}
    for flag, dest, check, default, kw, help_ in options.OPTIONS:
        name = dest.removeprefix("syncguard_") if dest != "syncguard" else "enabled"
        if dest == "syncguard_predict":  # the field holds the decision (early.decide), and
            assert (fields[name], default) == (False, "auto")  # auto decides per machine
            continue
        assert name in fields and fields[name] == default, dest
        assert flag == "--" + dest.replace("_", "-")
    assert options._default_text(()) == "none" and options._default_text(False) == "off"
    assert options._default_text(("debug", "trace")) == "debug,trace"


@pytest.mark.parametrize("value, expected", [(True, True), ("yes", True), ("0", False),
                                             ("Off", False)])
def test_bool(value, expected):
    assert options._bool(value, "x") is expected


def test_bool_names_the_source():
    with pytest.raises(ValueError, match=r"^ini option x: 'maybe' is not a boolean \(true/false\)$"):
        options._bool("maybe", "ini option x")


def test_declared_defaults_match_the_records_and_settings():
    """declare.py keeps its own copy of the default detectors so that declaring options imports
    nothing; it must be the records' tuple."""
    from syncguard.pytest_plugin import declare
    from syncguard.records.events import DETECTORS

    assert declare.DEFAULT_DETECTORS == DETECTORS
    assert [d for _, d, *_ in options.OPTIONS] == [d for _, d, *_ in declare.DECLARED]
    assert set(options.CHECKS) == {d for _, d, *_ in declare.DECLARED}
