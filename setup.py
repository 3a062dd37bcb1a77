"""The one compiled piece: the cuda detector's CUPTI callback in C (syncguard/detectors/_cuptifast.c).

Optional: where it cannot be built (no C compiler, no Python headers, CPython older than 3.11)
the install still succeeds and the detector runs its Python callback instead; every report says
which one ran. Everything else is declared in pyproject.toml.
"""
import sys

from setuptools import Extension, setup

ext = []
if sys.implementation.name == "cpython" and sys.version_info >= (3, 11):
    ext.append(Extension("syncguard.detectors.cuda._cuptifast", ["src/syncguard/detectors/cuda/_cuptifast.c"],
                         extra_compile_args=["-O2"], optional=True))
setup(ext_modules=ext)
