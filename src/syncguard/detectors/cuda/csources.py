"""The C sources of the cuda detector's compiled callback (``_cuptifast_c/``) and their digest.

Standard library only, and importing nothing of syncguard: setup.py loads this file by path
(syncguard is not importable while it is being built) to embed the digest of the sources it
compiles in the module it builds (the ``SYNCGUARD_SOURCE_DIGEST`` macro, read back as
``_cuptifast.SOURCE_DIGEST``), and reporting.provenance imports it to digest the same sources
where they are present. One definition for both, so a source tree and a wheel built from it
name the same C code the same way.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["C_DIR", "MODULE", "c_sources", "c_digest"]

#: the folder of the C sources, next to this file
C_DIR = Path(__file__).resolve().parent / "_cuptifast_c"
#: the import name of the module built from them
MODULE = "syncguard.detectors.cuda._cuptifast"
_SUFFIXES = (".c", ".h")


def c_sources(c_dir: str | os.PathLike = C_DIR) -> list[Path]:
    """The ``.c`` and ``.h`` files of ``c_dir``, in name order (empty where there is none)."""
    root = Path(c_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_file() and p.suffix in _SUFFIXES)


def c_digest(c_dir: str | os.PathLike = C_DIR) -> str | None:
    """SHA-256 over the C sources (each file's name and bytes, in name order); None without any."""
    files = c_sources(c_dir)
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()
