"""nox sessions: the harness's own tests, the audit of cases/ per torch version, the report.

    nox -s tests                 # python -m pytest -q (tests/ and cases/)
    nox -s audit                 # every version in TORCH_VERSIONS, one venv each
    nox -s "audit(2.11.0)"       # one version
    nox -s "audit(installed)"    # the torch already installed, no venv (the GPU machine: no registry)
    nox -s report                # reports/*.json + reports/baseline.json -> reports/matrix.md
    nox -s docs                  # docs/: the tables of measured figures and the module map
    nox -l --json -s audit       # the audit sessions as JSON: a CI workflow's torch matrix

Each audit writes <dir>/<cpu|cuda|predict>-torch-<version>.json, dir being SYNCGUARD_REPORT_DIR
(default reports/); "predict" when the run predicts (a CPU machine, unless the arguments after --
say --syncguard-predict=off or name detectors; or --syncguard-predict there), so a predicted run
is never taken for a measured one. Set SYNCGUARD_TORCH_INDEX to install torch from
another index (e.g. https://download.pytorch.org/whl/cpu). A CI matrix runs one session per job,
e.g. `nox -s "audit(2.11.0)" -- --syncguard-require-cuda` on a GPU runner, with
SYNCGUARD_REPORT_DIR naming the folder it uploads (docs/ci.md).
"""
from __future__ import annotations

import os

import nox

TORCH_VERSIONS = ["2.8.0", "2.11.0", "2.13.0", "2.14.1"]
AUDIT_PATHS = ["cases/"]  # what an audit session runs pytest on

nox.options.sessions = ["tests"]

# Printed by the session's own python: where this run's report goes, and whether the plugin is
# registered by an installed syncguard or must be named with -p.
_PROBE = """\
import importlib.metadata as md, torch
try:
    md.distribution("syncguard"); installed = "installed"
except md.PackageNotFoundError:
    installed = "source"
print("cuda" if torch.cuda.is_available() else "cpu", torch.__version__.split("+")[0], installed)
"""


def _install_torch(session: nox.Session, spec: str) -> None:
    index = os.environ.get("SYNCGUARD_TORCH_INDEX")
    session.install(spec, *(["--index-url", index] if index else []))


def report_path(platform: str, version: str, posargs: list[str], environ: dict[str, str]) -> str:
    """Where an audit's session report goes: one file per run (torch version x device), named
    for how its syncs were found, in the folder a CI job uploads."""
    kind = "predict" if _predicts(platform, posargs) else platform
    folder = environ.get("SYNCGUARD_REPORT_DIR") or "reports"
    return f"{folder.rstrip('/')}/{kind}-torch-{version}.json"


def _predicts(platform: str, posargs: list[str]) -> bool:
    """Whether the plugin predicts under these arguments (its --syncguard-predict=on|off|auto,
    auto by default: it predicts on a machine without CUDA unless detectors are named)."""
    words = [a.partition("=")[2] or "on" for a in posargs
             if a.partition("=")[0] == "--syncguard-predict"]
    asked = words[-1] if words else "auto"
    named = any(a.partition("=")[0] == "--syncguard-detectors" for a in posargs)
    return asked == "on" or (asked == "auto" and platform == "cpu" and not named)


def _audit(session: nox.Session) -> None:
    """Audit AUDIT_PATHS with the session's torch; the one helper every audit session uses."""
    # last line only: a CUDA build of torch may warn on stderr (captured too) on a CPU machine
    probe = session.run("python", "-c", _PROBE, silent=True)
    platform, version, installed = probe.strip().splitlines()[-1].split()
    plugin = [] if installed == "installed" else ["-p", "syncguard.plugin"]
    report = report_path(platform, version, session.posargs, dict(os.environ))
    session.run("python", "-m", "pytest", *plugin, "--syncguard", *AUDIT_PATHS,
                f"--syncguard-report={report}", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    _install_torch(session, "torch==2.13.0")  # the CPU wheel: never pull a multi-GB CUDA build
    session.install("-e", ".[dev]")
    session.run("python", "-m", "pytest", "-q", *session.posargs)


@nox.session
@nox.parametrize("torch", TORCH_VERSIONS, ids=TORCH_VERSIONS)
def audit(session: nox.Session, torch: str) -> None:
    _install_torch(session, f"torch=={torch}")
    session.install("-e", ".")
    _audit(session)


@nox.session(name="audit(installed)", venv_backend="none")
def audit_installed(session: nox.Session) -> None:
    _audit(session)


@nox.session(venv_backend="none")
def report(session: nox.Session) -> None:
    """Markdown matrix for reports/matrix.md; the gate itself is `--fail-on regression` in CI.
    Pass --allow-mixed-commits (after --) while the committed reports predate provenance."""
    session.run("python", "-m", "syncguard", "report", "reports/*-torch-*.json",
                "--baseline", "reports/baseline.json", "--format", "markdown",
                "--output", "reports/matrix.md", *session.posargs)


@nox.session(venv_backend="none")
def atlas(session: nox.Session) -> None:
    """reports/atlas.md from the committed corpus runs (reports/atlas-runs/, tools/corpus_report.py)."""
    session.run("python", "-m", "syncguard", "atlas", "reports/atlas-runs/*.json",
                "--format", "markdown", "--output", "reports/atlas.md", *session.posargs)


@nox.session(venv_backend="none")
def docs(session: nox.Session) -> None:
    """docs/' generated blocks: the tables of measured figures, from the committed evidence
    (tools/readme_figures.py), and docs/architecture.md's module map, from the tree of
    src/syncguard/ (tools/module_map.py). tests/test_readme_figures.py and
    tests/test_module_map.py fail when they disagree."""
    session.run("python", "tools/readme_figures.py", "--write")
    session.run("python", "tools/module_map.py", "--write")
