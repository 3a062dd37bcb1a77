"""nox sessions: the harness's own tests, the audit of cases/ per torch version, the report.

    nox -s tests                 # python -m pytest -q (tests/ and cases/)
    nox -s audit                 # every version in TORCH_VERSIONS, one venv each
    nox -s "audit(2.11.0)"       # one version
    nox -s "audit(installed)"    # the torch already installed, no venv (the GPU machine: no registry)
    nox -s report                # reports/*.json + reports/baseline.json -> reports/matrix.md
    nox -s docs                  # docs/: the tables of measured figures and the module map

Each audit writes reports/<cpu|cuda>-torch-<version>.json. Set SYNCGUARD_TORCH_INDEX to install
torch from another index (e.g. https://download.pytorch.org/whl/cpu).
"""
from __future__ import annotations

import os

import nox

TORCH_VERSIONS = ["2.8.0", "2.11.0", "2.13.0", "2.14.1"]

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


def _audit(session: nox.Session) -> None:
    """Audit cases/ with the session's torch; the one helper every audit session uses."""
    # last line only: a CUDA build of torch may warn on stderr (captured too) on a CPU machine
    probe = session.run("python", "-c", _PROBE, silent=True)
    platform, version, installed = probe.strip().splitlines()[-1].split()
    plugin = [] if installed == "installed" else ["-p", "syncguard.plugin"]
    session.run("python", "-m", "pytest", *plugin, "--syncguard", "cases/",
                f"--syncguard-report=reports/{platform}-torch-{version}.json", *session.posargs)


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
