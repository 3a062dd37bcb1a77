"""``syncguard report``: the run matrix of several session reports, gated against a baseline
(``syncguard atlas`` and ``syncguard calibrate``: atlas/render.py, reporting/calibration.py).

Exit codes: 0 fine, 1 the gate chosen by ``--fail-on`` tripped, 2 bad input (one line on stderr;
nothing is written). All input is read and checked before anything is written.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys
from pathlib import Path

from syncguard import __version__
from syncguard.atlas import render as atlas
from syncguard.reporting import baseline as bl
from syncguard.reporting import calibration
from syncguard.reporting import matrix as mx
from syncguard.records.events import SchemaError
from syncguard.reporting.formats import FORMATS
from syncguard.reporting.sessionfile import check_writable, load_document, read_json, write_atomic


class InputError(Exception):
    """Bad input: reported as one line on stderr, exit 2."""


DESCRIPTION = "syncguard report: the run matrix of several session reports, gated against a baseline."


def _parser() -> argparse.ArgumentParser:
    """Plain-text help (argparse prints no markup); every option names its default."""
    parser = argparse.ArgumentParser(prog="syncguard", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the installed syncguard's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="matrix of session reports (one column per run)",
                         description=DESCRIPTION)
    rep.add_argument("reports", nargs="+", metavar="REPORT",
                     help="session report JSON files or glob patterns (quoted patterns are expanded)")
    rep.add_argument("--baseline", metavar="FILE",
                     help="accepted outcomes per run and case (default: none, no comparison)")
    rep.add_argument("--format", choices=tuple(FORMATS), default="table",
                     help="; ".join(f"{name}: {f.help}" for name, f in FORMATS.items())
                     + " (default: table)")
    rep.add_argument("--all", dest="everything", action="store_true",
                     help="table and markdown: list every case; without it they lead with one "
                          "run's summary (or the cases that differ between runs) and the cases "
                          "with syncs, races, failures or changes, and only count the clean, "
                          "skipped and unaudited ones (json always lists every case) "
                          "(default: off)")
    rep.add_argument("--fail-on", choices=("regression", "any", "never"), default="never",
                     help="regression: exit 1 if a case got worse than the baseline (fails "
                          "or xfails, more or new syncs, a new allowed kind, more syncs at a "
                          "site than the baseline's, no longer audited, missing, newly audited "
                          "with syncs, a gated timing beyond its noise band or no longer "
                          "measured) or a run did (other detectors or code scope, incomplete, "
                          "a baseline run not given, nothing audited); "
                          "any: exit 1 on any unallowed sync or race; never: exit 0 "
                          "(default: never)")
    rep.add_argument("--update-baseline", action="store_true",
                     help="write the current outcomes to --baseline (runs not given are kept) "
                          "and print the changes it accepts; --fail-on still judges the "
                          "baseline as it was (default: off)")
    rep.add_argument("--drop-baseline-run", metavar="RUN", action="append", default=[],
                     help="with --update-baseline: remove this run from the baseline (its whole "
                          "label, or a torch version naming one run), for a version no longer "
                          "measured; repeatable (default: none)")
    rep.add_argument("--output", metavar="FILE",
                     help="write the rendered output here, atomically; never one of the inputs "
                          "(default: standard output)")
    rep.add_argument("--allow-mixed-commits", action="store_true",
                     help="compare runs made by different detector code (or without provenance), "
                          "among the reports or against the baseline's runs; refused with exit "
                          "2 otherwise, marked with a dagger when allowed (default: off)")
    rep.add_argument("--allow-predicted", action="store_true",
                     help="compare predicted runs (CPU stand-ins, rules measured on a GPU) with a "
                          "baseline whose runs of their label were measured (or that has none); "
                          "refused with exit 2 otherwise: the gate does not take a prediction "
                          "for a measurement (default: off)")
    atlas.add_arguments(sub.add_parser("atlas", help="which operations wait, per torch version "
                                                     "(corpus runs)"))
    calibration.add_arguments(sub.add_parser(
        "calibrate", help="agreement of a predicted run with a GPU run of the same suite",
        description=calibration.__doc__.split("\n\n", 1)[0]))
    return parser


def expand(patterns: list[str], exclude: Path | None = None) -> list[Path]:
    """Paths from arguments; patterns the shell left unexpanded are expanded here."""
    paths: list[Path] = []
    for pattern in patterns:
        if glob.has_magic(pattern) and not os.path.exists(pattern):
            matched = sorted(glob.glob(pattern))
            if not matched:
                raise InputError(f"no reports matched {pattern!r}")
            paths += map(Path, matched)
        else:
            paths.append(Path(pattern))
    # One entry per file; a baseline next to the reports (reports/baseline.json) is not a report.
    seen = {exclude.resolve()} if exclude else set()
    found = []
    for path in paths:
        if path.resolve() not in seen:
            seen.add(path.resolve())
            found.append(path)
    if not found and paths:  # every one was the baseline, left out above
        raise InputError(f"{' '.join(patterns)!r} is only the baseline ({exclude}); give the "
                         "session reports to compare with it")
    if not found:
        raise InputError(f"no reports matched {' '.join(patterns)!r}")
    return found


def load_baseline(path: Path) -> dict:
    if not path.exists():
        raise InputError(f"{path}: baseline not found (create it with --update-baseline)")
    try:
        data = read_json(path, "baseline")
    except SchemaError as e:
        raise InputError(str(e)) from None
    try:
        return bl.check(data)
    except SchemaError as e:
        raise InputError(f"{path}: {e}") from None


def render(fmt: str, matrix: mx.Matrix, cmp: bl.Comparison | None, to_terminal: bool,
           everything: bool = False) -> str | None:
    """Rendered text, or None when a rich table went straight to the terminal. ``everything``:
    ``--all``, every case."""
    chosen = FORMATS[fmt]
    if to_terminal and chosen.rich is not None:
        from rich.console import Console

        Console().print(chosen.rich(matrix, cmp, everything))
        return None
    return chosen.text(matrix, cmp, everything)


def _refuse_overwriting_an_input(output: Path, inputs: list[Path], baseline: Path | None,
                                 noun: str = "reports") -> None:
    """``--output`` must not name a file this command reads: it would replace the evidence.
    Both commands call it (``noun``: what their inputs are)."""
    target = output.resolve()
    for path in inputs + ([baseline] if baseline else []):
        if path.resolve() == target or (output.exists() and path.exists()
                                        and os.path.samefile(output, path)):
            what = "the baseline" if path == baseline else f"one of the input {noun}"
            raise InputError(f"--output {output} is {what}; refusing to overwrite it")


def _write(path: str | Path, text: str) -> None:
    try:
        write_atomic(path, text)
    except OSError as e:
        raise InputError(f"{path}: cannot write ({e.strerror or e})") from None


def matrix_command(args: argparse.Namespace) -> int:
    """``syncguard report``: read, check, render, write, then judge the gate."""
    if args.update_baseline and not args.baseline:
        raise InputError("--update-baseline needs --baseline FILE (where to write it)")
    if args.fail_on == "regression" and not args.baseline:
        raise InputError("--fail-on regression needs --baseline FILE")
    baseline_path = Path(args.baseline) if args.baseline else None
    inputs = expand(args.reports, exclude=baseline_path)
    if args.output:
        _refuse_overwriting_an_input(Path(args.output), inputs, baseline_path)
    docs = []
    for path in inputs:
        try:
            docs.append((str(path), load_document(path)))
        except SchemaError as e:
            raise InputError(str(e)) from None
    try:
        matrix = mx.build(docs)
    except SchemaError as e:
        raise InputError(str(e)) from None
    mixed = mx.mixed_runs(matrix)
    if mixed and not args.allow_mixed_commits:
        raise InputError(
            "refusing to compare runs made by different detector code: "
            + "; ".join(f"{r.label} ({r.provenance['code']}, commit {r.provenance['commit']})"
                        if r.code else f"{r.label} (no provenance)" for r in mixed)
            + " differ from the rest; pass --allow-mixed-commits to compare them anyway")
    baseline = None
    if baseline_path and not (args.update_baseline and not baseline_path.exists()):
        baseline = load_baseline(baseline_path)
    stale = bl.other_code(matrix, baseline) if baseline is not None else []
    if stale and not args.allow_mixed_commits:
        raise InputError(
            "refusing to compare runs with a baseline made by different detector code: "
            + "; ".join(stale) + "; pass --allow-mixed-commits to compare them anyway (with "
            "--update-baseline: to accept the new code)")
    guessed = bl.predicted_against_measured(matrix, baseline) if baseline is not None else []
    if guessed and not args.allow_predicted:
        raise InputError(
            "refusing to compare predicted runs with a measured baseline: " + "; ".join(guessed)
            + " predicted its syncs on CPU stand-ins, and the baseline measured that run on a "
            "GPU or has no predicted run of it; pass --allow-predicted to compare them anyway")
    if args.drop_baseline_run and not args.update_baseline:
        raise InputError("--drop-baseline-run needs --update-baseline (it changes the baseline)")
    try:
        drops = bl.resolve_drops(args.drop_baseline_run, baseline,
                                 tuple(r.label for r in matrix.runs))
    except ValueError as e:
        raise InputError(str(e)) from None
    cmp = bl.compare(matrix, baseline) if baseline is not None else None
    if cmp is not None and guessed:  # --allow-predicted: compared, and said so
        cmp = dataclasses.replace(cmp, notes=cmp.notes + tuple(
            f"{label}: predicted, not measured, compared with a measured baseline "
            "(--allow-predicted)" for label in guessed))

    # Input is good: everything made, and every target checked, before the first write, so that
    # an error (exit 2) still means nothing was written.
    text = render(args.format, matrix, cmp,
                  to_terminal=args.output is None and sys.stdout.isatty(),
                  everything=args.everything)
    updated = bl.make(matrix, baseline, drops) if args.update_baseline else None
    targets = [Path(args.output)] if args.output else []
    targets += [baseline_path] if updated is not None else []
    for target in targets:
        try:
            check_writable(target)
        except OSError as e:
            raise InputError(f"{target}: cannot write ({e.strerror or e})") from None
    if args.output:
        _write(args.output, text)
    elif text is not None:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError as e:  # a full disk, a closed pipe: exit 1 would read as the gate tripping
            raise InputError(f"cannot write to standard output ({e.strerror or e})") from None
    if updated is not None:
        _write(baseline_path, json.dumps(updated, indent=1, ensure_ascii=False) + "\n")
        accepted = bl.diff(baseline, updated)
        print(f"syncguard: {baseline_path}: --update-baseline accepted "
              f"{len(accepted)} change(s)" + "".join(f"\n  {line}" for line in accepted),
              file=sys.stderr)
    # The gate judges the baseline as it was before any --update-baseline.
    if args.fail_on == "regression":
        return 1 if cmp and cmp.regressions else 0
    if args.fail_on == "any":
        return 1 if mx.unallowed(matrix) else 0
    return 0


def atlas_command(args: argparse.Namespace) -> int:
    """``syncguard atlas``: corpus runs -> the atlas (atlas/render.py)."""
    inputs = expand(args.runs)
    if args.output:
        _refuse_overwriting_an_input(Path(args.output), inputs, None, noun="runs")
    try:
        return atlas.command(args, [str(p) for p in inputs])
    except SchemaError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{args.output}: cannot write ({e.strerror or e})") from None


def calibrate_command(args: argparse.Namespace) -> int:
    """``syncguard calibrate``: a GPU report and a predicted one -> agreement figures."""
    try:
        return calibration.command(args)
    except SchemaError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{e.filename or '?'}: cannot write ({e.strerror or e})") from None


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # usage errors (2) and --help (0) as a return value, for callers and tests
        return e.code if isinstance(e.code, int) else 2
    try:
        if args.command == "atlas":
            return atlas_command(args)
        if args.command == "calibrate":
            return calibrate_command(args)
        return matrix_command(args)
    except InputError as e:
        # one line whatever the input held: a report's own text (a node id, a malformed entry)
        # may carry a form feed or a line separator, which str.splitlines() breaks on
        print("syncguard: error: " + " ".join(str(e).splitlines()), file=sys.stderr)
        return 2
