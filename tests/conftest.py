import os

import pytest

from tests.gpu import cuda_available


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _torch_dynamo_imported_once():
    """torch._dynamo imported before any test, in each process that runs tests.

    Importing it registers C++ operator libraries (torch._inductor.test_operators), which a second
    import cannot register again. A ``pytester`` test puts back ``sys.modules`` as it was before
    the test (and before each in-process run), so when such a test was the first to import it
    (any TorchDispatchMode's first use does, prediction's included), the next import in that
    process registered again and raised. Which test comes first depends on the order, so under
    xdist one worker at random failed dozens of later tests. Imported here, it is in every
    snapshot. The import sets TORCHINDUCTOR_CACHE_DIR, which the subprocesses that tests start
    would inherit: it is put back as it was.
    """
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    import torch._dynamo  # noqa: F401

    if cache is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache


# -- pytester programs shared by the prediction tests ------------------------------------------
# (tests/test_predict_early.py, test_predict_default.py, test_predict_plugin.py)

#: a root conftest that reads CUDA at import time, the way kornia's does, and writes at its last
#: unconfigure what torch.cuda answers then (syncguard's block must be closed by then, and
#: torch.cuda the real one again)
CUDA_AT_IMPORT_CONFTEST = """
    import pytest
    import torch

    CUDA_AT_IMPORT = torch.cuda.is_available()

    @pytest.fixture
    def cuda_at_import():
        return CUDA_AT_IMPORT

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(config):
        import pathlib
        from syncguard.predict import session_active

        worker = getattr(config, "workerinput", {}).get("workerid", "main")
        name = "restored-" + worker
        pathlib.Path(str(config.rootpath), name).write_text(
            f"{torch.cuda.is_available()} {session_active()}")
"""

#: a CUDA test that skips where the conftest saw no CUDA; on a GPU (or predicted) its .item()
#: is a device-to-host copy
CUDA_TEST = """
    import pytest
    import torch

    def test_cuda(cuda_at_import):
        if not cuda_at_import:
            pytest.skip("Device 'cuda' is not available")
        x = torch.ones(3, device="cuda")
        assert x.sum().item() == 3
"""


@pytest.fixture
def cuda_suite(pytester):
    """A tiny suite: :data:`CUDA_AT_IMPORT_CONFTEST` and :data:`CUDA_TEST` (test_k.py)."""
    pytester.makeconftest(CUDA_AT_IMPORT_CONFTEST)
    pytester.makepyfile(test_k=CUDA_TEST)
    return pytester


@pytest.fixture
def syncguard_section():
    """The lines of a pytester run's ``syncguard`` terminal section, after its separator."""
    def section(res) -> list[str]:
        lines = res.outlines
        start = next(i for i, line in enumerate(lines) if "= syncguard =" in line)
        return lines[start + 1:]
    return section


@pytest.fixture
def report_tests(pytester):
    """The tests of the session report a pytester run wrote (``r.json`` by default), by name."""
    def tests(name: str = "r.json") -> dict:
        from syncguard.reporting.sessionfile import read_json

        return {t["nodeid"].split("::")[-1]: t
                for t in read_json(pytester.path / name)["tests"]}
    return tests
