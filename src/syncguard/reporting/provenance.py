"""Provenance: what produced a session report, so that two reports are only compared when the
difference between them can come from torch and not from the detector.

Recorded in every session report under ``"provenance"``:

* ``project``: the git commit of the project that ran (``HEAD`` of the folder pytest ran in) and
  whether tracked files differed from it (``dirty``); ``null`` outside a git checkout;
* ``syncguard``: its version; ``code``, a SHA-256 over every source the detectors run (the
  package's ``.py`` files, the predictor's ``rules.json`` and the C callback's sources, or, where
  an install holds no C source, the digest its built module carries); and ``git``, the commit
  of syncguard's own checkout (``{"commit": sha, "dirty": bool}``, or ``null`` where syncguard
  is not run from its own checkout). ``code`` is the identity of the detector code: two runs
  with the same ``code`` ran the same detectors, whatever else changed in the project, and a
  dirty tree is caught too;
* ``detectors``: the detectors the run asked for (they are part of syncguard, versioned by ``code``),
  and ``detectors_ran``: what most audited tests ran and why (``auto`` resolved, a fallback),
  filled in by the session report as tests end;
* ``torch``, ``cuda_build`` (torch's CUDA, ``null`` for a CPU build), ``gpu``, ``driver``;
* ``hypothesis``: its version, the settings profile in force and its ``max_examples``.

Reports written before provenance existed have none: the reporter shows "unknown" and the gate
treats them as made from other detector code than any other run.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Iterable, Mapping

from syncguard.attribution.codescope import IGNORING
from syncguard.detectors.cuda import csources

__all__ = ["collect", "code_digest", "git_state", "syncguard_git", "hypothesis_state",
           "code_identity",
           "detectors_used", "code_scope", "scope_key",
           "describe"]

_PKG_DIR = Path(__file__).resolve().parent.parent  # syncguard/
#: the package's data files that its code runs by (relative to the package)
_DATA = ("predict/rules.json",)
#: where the C callback's sources sit in the package (relative to it)
_C_DIR = csources.C_DIR.relative_to(_PKG_DIR)


def code_digest(package_dir: str | os.PathLike = _PKG_DIR) -> str:
    """SHA-256 over every source the detectors run: the package's ``.py`` files and its data
    files the code reads (``rules.json``), each by relative name and bytes in name order, then
    the C callback's sources as one digest (see :func:`c_code`)."""
    root = Path(package_dir)
    digest = hashlib.sha256()
    files = [p for p in root.rglob("*.py") if "__pycache__" not in p.relative_to(root).parts]
    files += [root / name for name in _DATA if (root / name).is_file()]
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    c = c_code(root)
    if c:
        digest.update(b"C\0" + c.encode() + b"\0")
    return digest.hexdigest()


def _built_digest() -> str | None:
    """The digest of the C sources the built callback module was compiled from, None where it
    was not built (or carries none)."""
    try:
        module = importlib.import_module(csources.MODULE)
    except ImportError:
        return None
    built = getattr(module, "SOURCE_DIGEST", None)
    return built if isinstance(built, str) and built else None


def c_code(package_dir: str | os.PathLike = _PKG_DIR) -> str | None:
    """The identity of the C callback code of the package at ``package_dir``: the digest of its
    C sources (csources.c_digest, the definition setup.py embeds in the module it builds); where
    the package holds none (a wheel), the digest its built module carries, so both name the same
    code alike. Where the package is the one imported and its built module was compiled from
    other sources than those present (edited, not rebuilt), both digests, so that the identity
    is neither the sources' nor the build's. None: no C code (a pure-Python install)."""
    root = Path(package_dir)
    sources = csources.c_digest(root / _C_DIR)
    built = _built_digest() if root.resolve() == _PKG_DIR else None
    if sources and built and built != sources:
        return f"sources {sources}, built from {built}"
    return sources or built


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _checkout_state(root: Path) -> dict[str, Any] | None:
    commit = _git(root, "rev-parse", "HEAD")
    if not commit:
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def _declared_commit() -> dict[str, Any] | None:
    declared = os.environ.get("SYNCGUARD_GIT_COMMIT")
    if not declared:
        return None
    return {"commit": declared, "dirty": os.environ.get("SYNCGUARD_GIT_DIRTY") == "1"}


def git_state(root: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """``{"commit": sha, "dirty": bool}`` of the checkout holding ``root``; None outside git.

    Dirty means a tracked file differs from the commit (untracked files, such as the report
    being written, do not count). A copy of a checkout without its ``.git`` (the GPU machine gets
    one) is named by its caller: ``SYNCGUARD_GIT_COMMIT`` (and ``SYNCGUARD_GIT_DIRTY=1`` if the
    copy had changes), which tools/gpu_suite.sh sets from the checkout it was sent from."""
    return _declared_commit() or _checkout_state(Path(root or os.getcwd()))


_PROJECT_NAME = re.compile(r'^\s*name\s*=\s*["\']syncguard["\']\s*$', re.MULTILINE)


def syncguard_git(package_dir: str | os.PathLike = _PKG_DIR) -> dict[str, Any] | None:
    """``{"commit": sha, "dirty": bool}`` of syncguard's own code, None where it cannot be known.

    ``SYNCGUARD_GIT_COMMIT`` (and ``SYNCGUARD_GIT_DIRTY``) where set: a copy of the checkout
    without its ``.git`` is named by its caller. Else the git checkout holding the package, only
    where it is syncguard's own: the package is its ``src/syncguard``, tracked there, and its
    ``pyproject.toml`` names the project syncguard. Anything else (an installed copy in a venv
    inside a user's repository, a copy vendored into another repository) is not: that
    repository's commit says nothing of syncguard's code. ``dirty``: a tracked file of the
    package differs from the commit."""
    declared = _declared_commit()
    if declared:
        return declared
    pkg = Path(package_dir).resolve()
    top = _git(pkg, "rev-parse", "--show-toplevel")
    if not top:
        return None
    root = Path(top.strip()).resolve()
    if pkg != root / "src" / "syncguard":
        return None
    try:
        pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    if not _PROJECT_NAME.search(pyproject.split("[project]", 1)[-1].split("\n[", 1)[0]):
        return None
    if _git(root, "ls-files", "--error-unmatch", "src/syncguard/__init__.py") is None:
        return None
    commit = _git(root, "rev-parse", "HEAD")
    if not commit:
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", "src/syncguard")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def hypothesis_state() -> dict[str, Any] | None:
    """The hypothesis version, the settings profile in force and its example count."""
    try:
        import hypothesis
        from hypothesis import settings
    except ImportError:
        return None
    profile = None
    getter = getattr(settings, "get_current_profile_name", None)
    if callable(getter):
        profile = getter()
    else:  # older hypothesis: the name is only kept privately
        profile = getattr(settings, "_current_profile", None)
    return {"version": hypothesis.__version__, "profile": profile,
            "max_examples": settings.default.max_examples,
            "derandomize": bool(settings.default.derandomize)}


def collect(detectors: Iterable[str], env: Mapping[str, Any] | None = None,
            root: str | os.PathLike | None = None) -> dict[str, Any]:
    """Provenance of a run about to start; ``env`` is report.environment() (torch, GPU...)."""
    from syncguard import __version__

    env = dict(env or {})
    return {
        "project": git_state(root),
        "syncguard": {"version": __version__, "code": code_digest(), "git": syncguard_git()},
        "detectors": list(detectors),
        "torch": env.get("torch"),
        "cuda_build": env.get("cuda_runtime"),
        "gpu": env.get("gpu"),
        "driver": env.get("driver"),
        "hypothesis": hypothesis_state(),
    }


def code_identity(doc: Mapping[str, Any]) -> str | None:
    """The detector-code identity of a loaded session report, None when it has no provenance."""
    prov = doc.get("provenance")
    if not isinstance(prov, Mapping):
        return None
    sg = prov.get("syncguard")
    code = sg.get("code") if isinstance(sg, Mapping) else None
    return code if isinstance(code, str) and code else None


def detectors_used(doc: Mapping[str, Any]) -> str | None:
    """The detectors that decided what a run could see: the names in ``detectors_ran`` (before
    its reason: "debug,trace: cuda detector not used (...)" is "debug,trace"), else those the
    options asked for; None when the report says neither. A fallback sees fewer syncs, which
    must not read as fewer syncs made."""
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), Mapping) else {}
    ran = prov.get("detectors_ran")
    if isinstance(ran, str) and ran.strip():
        return re.split(r"[:(]", ran, maxsplit=1)[0].strip() or ran
    options = doc.get("options") if isinstance(doc.get("options"), Mapping) else {}
    asked = options.get("detectors", prov.get("detectors"))
    return ",".join(map(str, asked)) if isinstance(asked, list) else None


def code_scope(doc: Mapping[str, Any]) -> str | None:
    """The code scope a run judged syncs in (``options.scope``): syncs outside it never reach
    a case, so a narrower scope sees fewer. None when the report does not say."""
    options = doc.get("options") if isinstance(doc.get("options"), Mapping) else {}
    scope = options.get("scope")
    return scope_key(scope) if isinstance(scope, str) else None


#: what a report's scope text carried after a given scope before it named no source; it said
#: the flag whether the scope came from the command line or the ini
_OLD_SOURCE = " (--syncguard-scope)"


def scope_key(text: str) -> str:
    """A scope text as the gate compares it: an older report's (or baseline's) text for a given
    scope, ``"src (--syncguard-scope)"``, reads as the ``"src"`` a report records now, so that
    a baseline written before the report stopped naming a source does not see a change."""
    head, sep, tail = text.partition(IGNORING)
    return head.removesuffix(_OLD_SOURCE) + sep + tail


def describe(doc: Mapping[str, Any]) -> dict[str, str]:
    """Short display strings per provenance field ("unknown" where the report has none)."""
    prov = doc.get("provenance")
    if not isinstance(prov, Mapping):
        return {"commit": "unknown (no provenance)", "code": "unknown", "detectors": "unknown",
                "torch": "unknown", "gpu": "unknown", "driver": "unknown",
                "hypothesis": "unknown"}
    project = prov.get("project") if isinstance(prov.get("project"), Mapping) else None
    if project and isinstance(project.get("commit"), str):
        commit = project["commit"][:10] + (" (dirty)" if project.get("dirty") else "")
    else:
        commit = "not a git checkout"
    sg = prov.get("syncguard") if isinstance(prov.get("syncguard"), Mapping) else {}
    hyp = prov.get("hypothesis") if isinstance(prov.get("hypothesis"), Mapping) else None
    dets = prov.get("detectors")
    torch_v = str(prov.get("torch") or "?")
    build = prov.get("cuda_build")
    return {
        "commit": commit,
        "code": f"syncguard {sg.get('version', '?')} · code {str(sg.get('code') or '?')[:10]}",
        "detectors": (",".join(map(str, dets)) if isinstance(dets, list) else "?")
        + (f" (ran: {prov['detectors_ran']})" if isinstance(prov.get("detectors_ran"), str)
           else ""),
        "torch": f"{torch_v} ({'CUDA ' + str(build) if build else 'CPU build'})",
        "gpu": str(prov.get("gpu") or "none"),
        "driver": str(prov.get("driver") or "none"),
        "hypothesis": (f"{hyp.get('profile')} profile, {hyp.get('max_examples')} examples"
                       if hyp else "not installed"),
    }
