"""Session reports: the JSON a run of ``pytest --syncguard`` writes, and reading it back.

One document per run (torch version × device). Written atomically so an interrupted run never
leaves half a file; read back strictly so the reporter can say exactly what is wrong with an input.

Document shape (``schema_version`` 1)::

    {"schema_version": 1, "kind": "syncguard-session", "complete": true,
     "created": "2026-11-29T16:00:00+00:00",
     "environment": {"torch": "2.11.0+cu130", "torch_git": "...", "cuda_runtime": "13.0",
                     "driver": "580.159.04", "gpu": "NVIDIA H200", "gpu_count": 1,
                     "device": "cuda" | "cpu", "python": "3.12.3", "platform": "...",
                     "hostname": "...", "syncguard": "0.1.0"},
     "options": {"mode": "fail", "detectors": ["debug", "trace"], "races": false},
     "summary": {"tests": 10, "audited": 8, "clean": 6, "with_syncs": 1, "allowed": 1,
                 "not_audited": 2},
     "tests": [{"nodeid": "cases/test_merge.py::test_x[cpu_mask]", "outcome": "passed",
                "audit": "clean" | "syncs" | "allowed" | "not_audited" | "off",
                "reason": null, "syncs": [SyncEvent...], "allowed": [SyncEvent...],
                "races": [RaceEvent...], "duration_s": 0.12, "examples": null | int,
                "measurements": {} , "worker": null | "gw0", "device": null | "cuda:0"}]}
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from .events import SCHEMA_VERSION, RaceEvent, SchemaError, SyncEvent, check_schema

AUDIT_STATES = ("clean", "syncs", "allowed", "not_audited", "off")
TEST_FIELDS = ("nodeid", "outcome", "audit", "reason", "syncs", "allowed", "races", "duration_s",
               "examples", "measurements", "worker", "device")


def environment() -> dict[str, Any]:
    """Where a run happened; never initialises CUDA when it is absent."""
    from . import __version__

    env: dict[str, Any] = {
        "torch": None, "torch_git": None, "cuda_runtime": None, "driver": None, "gpu": None,
        "gpu_count": 0, "device": "cpu", "python": platform.python_version(),
        "platform": platform.platform(), "hostname": socket.gethostname(), "syncguard": __version__,
    }
    try:
        import torch
    except ImportError:
        return env
    env["torch"] = torch.__version__
    env["torch_git"] = getattr(torch.version, "git_version", None)
    env["cuda_runtime"] = torch.version.cuda
    if torch.cuda.is_available():
        env["device"] = "cuda"
        env["gpu_count"] = torch.cuda.device_count()
        env["gpu"] = torch.cuda.get_device_name(0)
        try:
            env["driver"] = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
        except Exception:  # pragma: no cover - depends on the build
            env["driver"] = None
        if env["driver"] is None:
            env["driver"] = _nvidia_smi_driver()
    return env


def _nvidia_smi_driver() -> str | None:
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def new_document(options: dict[str, Any], env: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "syncguard-session",
        "complete": False,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": env if env is not None else environment(),
        "options": dict(options),
        "summary": {},
        "tests": [],
    }


def summarize(tests: list[dict[str, Any]]) -> dict[str, int]:
    counts = {"tests": len(tests), "audited": 0, "clean": 0, "with_syncs": 0, "allowed": 0,
              "not_audited": 0}
    for t in tests:
        state = t.get("audit")
        if state in ("clean", "syncs", "allowed"):
            counts["audited"] += 1
        counts["clean"] += state == "clean"
        counts["with_syncs"] += state == "syncs"
        counts["allowed"] += state == "allowed"
        counts["not_audited"] += state == "not_audited"
    return counts


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write via a temp file in the same folder and rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_document(path: str | os.PathLike, doc: dict[str, Any]) -> None:
    doc["summary"] = summarize(doc["tests"])
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=False) + "\n")


def load_document(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate one session report; raises SchemaError with a one-line reason."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SchemaError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"{path}: not valid JSON (truncated?): {e.msg} at line {e.lineno}") from None
    try:
        check_schema(doc, "session report")
        if doc.get("kind") != "syncguard-session":
            raise SchemaError(f"kind is {doc.get('kind')!r}, not 'syncguard-session'")
        for key in ("environment", "tests"):
            if key not in doc:
                raise SchemaError(f"missing {key!r}")
        if not isinstance(doc["tests"], list):
            raise SchemaError("'tests' is not a list")
        for t in doc["tests"]:
            if not isinstance(t, dict) or "nodeid" not in t or t.get("audit") not in AUDIT_STATES:
                raise SchemaError(f"malformed test entry {str(t)[:80]}")
            # Validate events strictly: a report that cannot be read back is a bug worth seeing.
            for e in t.get("syncs", []) + t.get("allowed", []):
                SyncEvent.from_dict(e)
            for r in t.get("races", []):
                RaceEvent.from_dict(r)
    except SchemaError as e:
        raise SchemaError(f"{path}: {e}") from None
    except TypeError as e:
        raise SchemaError(f"{path}: malformed event ({e})") from None
    return doc


def run_label(doc: dict[str, Any]) -> str:
    """The column a run gets in the matrix: torch version × device."""
    env = doc.get("environment", {})
    torch_v = env.get("torch") or "?"
    dev = env.get("gpu") if env.get("device") == "cuda" else "cpu"
    return f"torch {torch_v} · {dev or env.get('device') or '?'}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `syncguard report`")
