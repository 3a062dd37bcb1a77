"""The one compiled piece: the cuda detector's CUPTI callback in C
(src/syncguard/detectors/cuda/_cuptifast_c/, built as syncguard.detectors.cuda._cuptifast).

Optional: where it cannot be built (no C compiler, no Python headers, CPython older than 3.11)
the install still succeeds and the detector runs its Python callback instead; every report says
which one ran. The module embeds the digest of the C sources it was built from
(SYNCGUARD_SOURCE_DIGEST, computed by csources.py, loaded here by path since syncguard is not
importable while it is being built), so that provenance names the C code where a wheel holds no
source. Everything else is declared in pyproject.toml.

SYNCGUARD_NO_EXTENSION=1 in the build's environment leaves the extension out on purpose: a wheel
that behaves as one built where no compiler was found (CI installs one to check the Python
callback is what the detector then picks).
"""
import importlib.util
import os
import sys
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "_syncguard_csources", HERE / "src" / "syncguard" / "detectors" / "cuda" / "csources.py")
csources = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(csources)

ext = []
files = csources.c_sources()
no_ext = os.environ.get("SYNCGUARD_NO_EXTENSION", "") not in ("", "0")
if not no_ext and sys.implementation.name == "cpython" and sys.version_info >= (3, 11) and files:
    rel = [p.relative_to(HERE).as_posix() for p in files]
    ext.append(Extension(
        csources.MODULE,
        sources=[f for f in rel if f.endswith(".c")],
        depends=[f for f in rel if f.endswith(".h")],
        define_macros=[("SYNCGUARD_SOURCE_DIGEST", '"%s"' % csources.c_digest())],
        extra_compile_args=["-O2", "-fvisibility=hidden"],
        optional=True))
setup(ext_modules=ext)
