"""reports/gpu/README.md is generated from the committed GPU folders (tools/gpu_provenance.py):
a folder added, or a log changed, without regenerating it fails here."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_evidence_index_regenerates_from_the_committed_folders():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_provenance.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_step_result_is_read_from_its_own_log(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_provenance as gp

    d = tmp_path / "9.9.9"
    d.mkdir()
    (d / "gpu.txt").write_text("commit abc dirty 0\n")
    (d / "steps.txt").write_text("cases-9.9.9 rc=1 12s\nmutation-9.9.9 rc=0 3s\n")
    (d / "cases-9.9.9.log").write_text("x\n==== 2 failed, 3 passed in 1.0s ====\n")
    (d / "mutation-9.9.9.log").write_text("# caught 4, not caught 0, of 4 mutants\n1 failed in 2s\n")
    lines = gp.folder(d)
    assert "| `cases-9.9.9` | 1 | 12 | 2 failed, 3 passed in 1.0s |" in lines
    assert "| `mutation-9.9.9` | 0 | 3 | # caught 4, not caught 0, of 4 mutants |" in lines
    # the overhead benchmark: the default detector's ratio per workload line, not the ms of its
    # carry-over lines, which name the same configuration
    (d / "steps.txt").write_text("overhead-9.9.9 rc=0 90s\n")
    (d / "overhead-9.9.9.log").write_text(
        "100 merges: bare 1.000x; audit(cuda) pointer 1.048x; audit(cuda) activity 1.2x\n"
        "The bare loop's median ms by the configuration just before it (carry-over; first left "
        "out): audit(cuda) pointer 10.036; bare (A/A control) 8.154\n")
    assert ("| `overhead-9.9.9` | 0 | 90 | ratio of medians, as the log prints it: 100 merges: "
            "audit(cuda) pointer 1.048x |") in gp.folder(d)
    (d / "overhead-9.9.9.log").unlink()
    (d / "steps.txt").write_text("cases-9.9.9 rc=1 12s\nmutation-9.9.9 rc=0 3s\n")
    # a step cut off mid-run left its log and no record: shown as not finished, never as passed
    (d / "tests-gpu-9.9.9.log").write_text("....\n")
    assert any(x.startswith("| `tests-gpu-9.9.9` | – | – | did not finish") for x in gp.folder(d))
