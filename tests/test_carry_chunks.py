"""tools/carry_chunks.sh: a carried torch's parts re-cut into chunks that fit one device call.

On the CPU, in a throw-away git repository with made-up parts (random bytes): the chunks fit the
room the tree leaves, and joining them as the last call's `tools/device_lease.sh assemble` does
gives back every part, byte for byte, under the names assemble.sh reads.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "carry_chunks.sh"
MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("split") is None,
                                reason="needs git and split")


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".carry" / "9.9.9" / "00").mkdir(parents=True)
    (repo / ".carry" / "9.9.9" / "01").mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("/.carry/\n")
    (repo / "tree.bin").write_bytes(os.urandom(2 * MIB))  # the tree a call sends besides
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    parts = {"00/torch.whl.part000": os.urandom(9 * MIB), "00/torch.whl.part001": os.urandom(MIB),
             "01/torch.whl.part002": os.urandom(5 * MIB), "01/assemble.sh": b"echo assembled\n",
             "01/manifest.json": b"[]\n"}
    for name, data in parts.items():
        (repo / ".carry" / "9.9.9" / name).write_bytes(data)
    return repo, parts


def test_chunks_fit_the_room_and_join_back_into_every_part(tmp_path):
    repo, parts = _repo(tmp_path)
    out = subprocess.run(["bash", str(TOOL), "9.9.9", "15"], cwd=repo, capture_output=True,
                         text=True, check=True).stdout
    chunks = sorted((repo / ".carry" / "9.9.9-chunks").iterdir())
    room = 15 * MIB - 2 * MIB - 4 * MIB  # the limit, less the tree, less the tool's margin
    sizes = [f.stat().st_size for d in chunks for f in d.iterdir()]
    assert len(chunks) == 2 and max(sizes) <= room, sizes  # 15 MiB of parts in 9 MiB chunks
    calls = re.findall(r'carry=\["([^"]+)"\]', out)
    assert calls == [f".carry/9.9.9-chunks/{d.name}" for d in chunks]
    assert "tools/device_lease.sh assemble 9.9.9 && " in out.splitlines()[-1]
    assert "assemble" not in "".join(out.splitlines()[1:-1])  # only the last call assembles
    # the device's side of the last call (device_lease.sh assemble): join, unpack, flatten
    joined = tmp_path / "joined.tar"
    with joined.open("wb") as f:
        for d in chunks:
            for c in sorted(d.iterdir()):
                f.write(c.read_bytes())
    with tarfile.open(joined) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert got == parts


def test_bad_input_is_one_line_and_nothing_is_written(tmp_path):
    repo, _ = _repo(tmp_path)
    for args, says in ((["1.2.3"], "no carry-torch parts in .carry/1.2.3"),
                       (["9.9.9", "big"], "LIMIT_MIB must be a whole number of MiB"),
                       (["9.9.9", "8"], "leaves under 8 MiB")):
        proc = subprocess.run(["bash", str(TOOL), *args], cwd=repo, capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr
    assert not (repo / ".carry" / "9.9.9-chunks").exists()
