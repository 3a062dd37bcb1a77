"""The benchmarks, and what their scripts and the tools that read them share."""
import argparse
import json
import os


def _write(out, text) -> None:
    """``text`` to ``out`` whole or not at all (a temporary file beside it, then renamed)."""
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def emit(lines, out=None) -> None:
    """Print a result table's markdown lines and, given ``out``, write them there too, whole or
    not at all."""
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    if out:
        _write(out, text)


def emit_doc(doc, lines, folder, stem) -> None:
    """A probe's result: the markdown ``lines`` printed and written to ``folder/stem.md``, and
    ``doc`` to ``folder/stem.json``, each whole or not at all."""
    os.makedirs(folder, exist_ok=True)
    _write(os.path.join(folder, f"{stem}.json"), json.dumps(doc, indent=1))
    emit(lines, os.path.join(folder, f"{stem}.md"))


def _probe_parser(size: str, default: int) -> argparse.ArgumentParser:
    """Every probe's two options: ``size`` (an int option that sizes the run) and ``--out DIR``,
    where its results go (default $OUT, the folder the GPU machine brings back)."""
    ap = argparse.ArgumentParser()
    ap.add_argument(size, type=int, default=default)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    return ap


def gpu_probe_args(rounds: int):
    """A GPU probe's arguments (``--rounds``, ``--out``, default $OUT), once the cuda detector is
    known to be available here; else exit with why it is not."""
    args = _probe_parser("--rounds", rounds).parse_args()
    from syncguard.detectors.cuda.detector import HUB

    why = HUB.unavailable()
    if why:
        raise SystemExit(f"cuda detector unavailable: {why}")
    return args


def probe_main(argv, run, render, stem: str, size: str, default: int) -> int:
    """A probe's command line: ``run(size)`` times it and DIR/STEM-<torch>.{json,md} are written
    (``--out DIR``, default $OUT); or ``--render FILE.json`` writes them again from a committed
    run, so a table is rebuilt from its evidence and never edited. ``size``: the option that
    sizes a run (``--rounds``, ``--pairs``)."""
    ap = _probe_parser(size, default)
    ap.add_argument("--render", metavar="FILE.json")
    a = ap.parse_args(argv)
    if a.render:
        with open(a.render) as fh:
            doc = json.load(fh)
    else:
        doc = run(getattr(a, size.lstrip("-").replace("-", "_")))
    emit_doc(doc, render(doc), a.out, f"{stem}-{doc['torch'].split('+')[0]}")
    return 0


def commit_label(state: dict) -> str:
    """A result's commit as its title prints it: the short hash, and "(with changes)" where the
    tree was dirty. ``state``: ``provenance.git_state``'s dict, or a probe JSON's own fields."""
    return (state.get("commit") or "unknown")[:7] + (" (with changes)" if state.get("dirty") else "")


def probe_title(what: str, doc: dict) -> str:
    """A GPU probe's markdown title: what it measured, on which GPU, torch and commit."""
    return f"# {what} · {doc['gpu']} · torch {doc['torch']} · commit {commit_label(doc)}"
