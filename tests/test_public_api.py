"""The public surface, listed by hand: the library API, the pytest options, ini keys, markers,
fixture and hook, and the CLI. A change to any of them is a change users see, so it must show up
here as an edited list, never as a side effect of moving code around.

The expected names are typed here from the README and ``--help`` as users read them; none is
read from the code under test.
"""
from __future__ import annotations

import importlib
import importlib.metadata as md
import subprocess
import sys

import pytest

LIBRARY = {
    "syncguard": ["audit", "forbid", "allow", "RegionReport", "Report", "SyncEvent", "RaceEvent",
                  "SyncError", "SchemaError", "__version__"],
    "syncguard.testing": ["fake_sync"],
    "syncguard.cpupath": ["cpu_path_audit", "CpuPathReport", "CpuPathFinding"],
    "syncguard.predict": ["predicting", "predicted", "session_active", "Prediction",
                          "Unmodelled", "CudaStandIn", "region_report"],
    "syncguard.strategies": ["masks", "dtypes", "embedding_shapes", "mask_placements",
                             "global_modes", "merge_inputs", "deterministic_algorithms",
                             "available_dtypes", "random_bits", "MergeInputs", "EmbeddingShape",
                             "GlobalMode"],
}

OPTIONS = ["--syncguard", "--syncguard-mode", "--syncguard-detectors", "--syncguard-races",
           "--syncguard-report", "--syncguard-isolate", "--syncguard-require-cuda",
           "--syncguard-fail-on-phase", "--syncguard-scope", "--syncguard-ignore",
           "--syncguard-keep-events", "--syncguard-max-stacks", "--syncguard-predict",
           "--syncguard-predict-torch"]
INI = ["syncguard", "syncguard_mode", "syncguard_detectors", "syncguard_races", "syncguard_report",
       "syncguard_isolate", "syncguard_require_cuda", "syncguard_fail_on_phase", "syncguard_scope",
       "syncguard_ignore", "syncguard_keep_events", "syncguard_max_stacks", "syncguard_predict",
       "syncguard_predict_torch", "syncguard_warmup"]
MARKERS = ["syncguard", "allow_sync", "no_syncguard"]

#: flags of ``syncguard`` itself, before any subcommand
CLI_TOP = ["--version"]

CLI = {
    "report": ["--baseline", "--format", "--fail-on", "--update-baseline",
               "--drop-baseline-run", "--output", "--allow-mixed-commits", "--all"],
    "atlas": ["--format", "--output"],
    "calibrate": ["--json", "--markdown", "--suite"],
}


@pytest.mark.parametrize("module", sorted(LIBRARY))
def test_library_names_import(module):
    mod = importlib.import_module(module)
    missing = [name for name in LIBRARY[module] if not hasattr(mod, name)]
    assert not missing, f"{module} lost {missing}"


def test_top_level_all_is_the_listed_api():
    import syncguard
    assert sorted(syncguard.__all__) == sorted(LIBRARY["syncguard"])


def test_entry_points_name_the_plugin_and_the_console_script():
    eps = md.entry_points()
    plugin = [ep for ep in eps.select(group="pytest11") if ep.name == "syncguard"]
    script = [ep for ep in eps.select(group="console_scripts") if ep.name == "syncguard"]
    assert [ep.value for ep in plugin] == ["syncguard.plugin"]
    assert len(script) == 1
    assert callable(script[0].load())


def test_pytest_options_ini_keys_markers_fixture_and_hook(pytester):
    pytester.makepyfile(test_x="def test_x(): pass\n")
    help_text = pytester.runpytest("--help").stdout.str()
    for name in OPTIONS:
        assert name in help_text, name
    ini_lines = [line.split()[0] for line in help_text.splitlines()
                 if line.strip().startswith("syncguard")]
    assert sorted(set(ini_lines) & set(INI)) == sorted(INI)
    markers = pytester.runpytest("--markers").stdout.str()
    for name in MARKERS:
        assert f"@pytest.mark.{name}" in markers, name
    fixtures = pytester.runpytest("--fixtures").stdout.str()
    assert any(line.startswith("syncguard -- ") for line in fixtures.splitlines())
    pytester.makeconftest("def pytest_syncguard_warmup(config):\n    pass\n")
    assert pytester.runpytest().ret == 0  # an unknown hook name would be a PluginValidationError


@pytest.mark.parametrize("command", sorted(CLI))
def test_cli_commands_and_flags(command):
    top = subprocess.run([sys.executable, "-m", "syncguard", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "{report,atlas,calibrate}" in top
    for flag in CLI_TOP:
        assert flag in top, f"syncguard lost {flag}"
    out = subprocess.run([sys.executable, "-m", "syncguard", command, "--help"],
                         capture_output=True, text=True, check=True).stdout
    for flag in CLI[command]:
        assert flag in out, f"syncguard {command} lost {flag}"
