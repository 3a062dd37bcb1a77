"""The import-linter contracts (.importlinter at the repo root) hold on the real tree, and they
are not vacuous: a copy of the package with one forbidden import added fails and names the
contract it broke."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / ("lint-imports.exe" if os.name == "nt" else "lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed")


def lint(src: Path, cwd: Path) -> subprocess.CompletedProcess:
    """lint-imports with the repo's contracts over the package found in ``src``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(src)  # ahead of the editable install's path entry
    return subprocess.run([str(LINT), "--no-cache", str(ROOT / ".importlinter")],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_real_tree_keeps_every_contract(tmp_path):
    done = lint(ROOT / "src", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "syncguard", src / "syncguard",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
    return src


@pytest.mark.parametrize("module, line, contract, chain", [
    ("records/events.py", "import syncguard.reporting.matrix", "syncguard's layers",
     "syncguard.records.events -> syncguard.reporting.matrix"),
    ("predict/rules.py", "import syncguard.detectors.routing", "syncguard's layers",
     "syncguard.predict.rules -> syncguard.detectors.routing"),
    ("atlas/render.py", "import syncguard.cli", "syncguard's layers",
     "syncguard.atlas.render -> syncguard.cli"),
    ("regions/region.py", "import pytest", "only the pytest plugin imports pytest",
     "syncguard.regions.region -> pytest"),
    ("cli.py", "import tools", "never imports the repository's dev folders",
     "syncguard.cli -> tools"),
])
def test_one_forbidden_import_breaks_the_contract_it_names(tmp_path, module, line, contract, chain):
    src = _copy(tmp_path)
    path = src / "syncguard" / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}  # injected by the test\n",
                    encoding="utf-8")
    done = lint(src, tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    broken = [ln for ln in out.splitlines() if ln.rstrip().endswith("BROKEN")]
    assert len(broken) == 1 and contract in broken[0], out
    assert chain in out, out
