"""Which syncguard modules ``import syncguard.plugin`` loads, read from ``python -X importtime``.

    python bench/plugin_imports.py [--out-dir reports/cpu]

pytest imports the plugin in every run of a venv where syncguard is installed, so this is the
import cost every user pays, enabled or not. The child interpreter runs from a temporary folder
so that the installed package, not a source folder on the path, is what it imports. Writes
``plugin-imports.json`` and ``plugin-imports.md``, whose first fields are the project commit and
whether the tree was dirty. tests/test_plugin_lazy.py holds the limit; this records what it is.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip()


def imported(statement: str) -> list[dict]:
    """(module, self and cumulative microseconds) of each import ``statement`` made, in order."""
    with tempfile.TemporaryDirectory() as tmp:
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], cwd=tmp,
                             capture_output=True, text=True, check=True).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = (part.strip() for part in line[len("import time:"):].split("|"))
        rows.append({"module": name.strip(), "self_us": int(self_us), "cumulative_us": int(cumulative_us)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "reports" / "cpu")
    args = parser.parse_args(argv)
    rows = imported("import syncguard.plugin")
    ours = [r for r in rows if r["module"].split(".")[0] == "syncguard"]
    doc = {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain")),
           "python": sys.version.split()[0], "command": "python -X importtime -c 'import syncguard.plugin'",
           "syncguard_modules": [r["module"] for r in ours],
           "torch_imported": any(r["module"] == "torch" for r in rows),
           "modules_imported": len(rows), "rows": ours}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "plugin-imports.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    lines = [f"# `import syncguard.plugin`: what it loads",
             "",
             f"Commit `{doc['commit']}`{' (dirty tree)' if doc['dirty'] else ''}, Python {doc['python']}, "
             f"`{doc['command']}` from a temporary folder (bench/plugin_imports.py).",
             "",
             f"- syncguard modules: {len(ours)} ({', '.join(f'`{m}`' for m in doc['syncguard_modules'])})",
             f"- torch imported: {'yes' if doc['torch_imported'] else 'no'}",
             f"- modules imported in all (the standard library and pytest's own included): {len(rows)}",
             "",
             "| module | self (µs) | cumulative (µs) |", "| --- | --- | --- |"]
    lines += [f"| `{r['module']}` | {r['self_us']} | {r['cumulative_us']} |" for r in ours]
    (args.out_dir / "plugin-imports.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
