"""The session report file: the JSON one ``pytest --syncguard-report=PATH`` run writes, and reading it back.

One document per run (torch version × device). Each test is one frozen :class:`TestEntry`, the
same object the plugin builds, the summary prints and the matrix reads. Written atomically so an
interrupted run never leaves half a file; read back strictly so the reporter can say exactly what
is wrong with an input.

Document shape (``schema_version`` 5, which added a test's ``weaker``; version 4, which added a
test's ``detectors``, read as is, its tests without ``weaker``; version 3, which added
``detector_reason``, and version 2 read as is, their tests without ``detectors``; version 1
documents, one record per event, are still read: their events are aggregated on load, every one
counted as in scope since version 1 had no scopes)::

    {"schema_version": 5, "kind": "syncguard-session", "complete": true, "predicted": false,
     "created": "2026-11-29T16:00:00+00:00",
     "environment": {"torch": "2.11.0+cu130", "torch_git": "...", "cuda_runtime": "13.0",
                     "driver": "580.159.04", "gpu": "NVIDIA H200", "gpu_count": 1,
                     "device": "cuda" | "cpu", "python": "3.12.3", "platform": "...",
                     "hostname": "...", "syncguard": "0.1.0"},
     "provenance": {"project": {"commit": "...", "dirty": false},
                    "syncguard": {"version": "0.1.0", "code": "<sha256 of its source>"},
                    "detectors": ["auto"], "torch": "2.11.0+cu130",
                    "detectors_ran": "cuda: CUPTI callbacks on the CUDA runtime and driver",
                    "cuda_build": "13.0", "gpu": "NVIDIA H200", "driver": "580.159.04",
                    "hypothesis": {"version": "6.170.17", "profile": "gpu",
                                   "max_examples": 30, "derandomize": false}},
     "options": {"mode": "fail", "detectors": ["debug", "trace"], "races": false,
                 "scope": "src/ (default; ...)", "keep_events": false, "max_stacks": 5000,
                 "scope_from": "ini option syncguard_scope (/path/pytest.ini)"},
     "summary": {"tests": 10, "audited": 8, "clean": 6, "with_syncs": 1, "allowed": 1,
                 "not_audited": 2, "syncs": 12, "outside_scope": 30},
     "frames": ["/path/file.py:12 in f", ...],
     "tests": [{"nodeid": "cases/test_merge.py::test_x[cpu_mask]", "outcome": "passed",
                "audit": "clean" | "syncs" | "allowed" | "not_audited" | "off",
                "reason": null, "syncs": [SiteRecord...], "allowed": [SiteRecord...],
                "outside": [SiteRecord...], "races": [RaceEvent...], "duration_s": 0.12,
                "examples": null | int, "measurements": {} , "worker": null | "gw0",
                "device": null | "cuda:0", "events": [SyncEvent...],
                "detector_reason": "debug,trace: cuda detector not used (...)",
                "detectors": ["debug", "trace"],
                "weaker": {"detectors": "debug,trace", "reason": "cuda detector not used (...)"}}]}

``predicted``: the run's syncs were predicted on CPU stand-ins from rules measured on a GPU
(``--syncguard-predict``, by default on a machine without CUDA), not measured; optional (a
report without it says so in ``options.predict``, see :func:`is_predicted`), so older reports
read as before. ``options.predict_why`` says why the run predicted or not.
``scope``: the code scope, which the gate compares, naming no source (one scope given on the
command line or in the ini is one scope); ``scope_from``, written for a given scope only, says
where it was given, and ``ignore_from``, written when names are ignored, where those were.
``detectors_ran``: the detectors most audited tests ran under and why (``auto`` resolved, or a
fallback's reason); a test's ``detector_reason`` is written only where it differs from it.
``detectors``: the names of the detectors that judged an audited test (its region's
``RegionReport.detectors``, ``races`` included), absent for a test not audited. Why a field of its
own beside the prose reason: the gate compares it with the baseline's per test (one test's region
can fall back while the run's others do not), and the reason does not name every detector (an
``auto`` resolved to cuda says "cuda: ..." whatever else ran beside it).
``weaker``: written only for a test whose regions ran weaker detectors than it asked for
(:mod:`syncguard.reporting.weaker`): what ran and why; the summary and the report formats mark it.

``syncs``/``allowed``/``outside``: one :class:`~syncguard.attribution.aggregate.SiteRecord` per (site, kind,
API, op): unallowed syncs inside the code scope, allowed ones inside it, and every sync outside
it (never failing). A record's ``stack`` is a list of indexes into ``frames``, the document's
table of distinct frames, so that the many tests sharing pytest's outer frames store them once;
only the first ``max_stacks`` records of a document keep a stack. ``events`` is empty unless
``--syncguard-keep-events``: then every sync event of the test, as observed, stacks inline.
A record's ``phases`` add up to its ``count``; the counts of a whole document add up to at most
:data:`syncguard.records.schema.MAX_SYNCS` (ten million), and a document claiming more is refused.
"""
from __future__ import annotations

import dataclasses
import datetime
import gzip
import json
import os
import platform
import socket
import stat
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from syncguard.records import schema
from syncguard.attribution.aggregate import SiteRecord, aggregate, total
from syncguard.records.events import RaceEvent, SyncEvent
from syncguard.records.schema import SchemaError, check_fields, check_schema, check_types, parse_json

AUDIT_STATES = ("clean", "syncs", "allowed", "not_audited", "off")
AUDITED_STATES = ("clean", "syncs", "allowed")
#: the session document's own version (the region report and the baseline stay at 1)
SESSION_SCHEMA_VERSION = 5
READS = (1, 2, 3, 4, 5)
#: records that keep their first stack in one document, unless --syncguard-max-stacks says
MAX_STACKS = 5000


@dataclass(frozen=True)
class TestEntry:
    """One test of a session: how it ended, what the audit saw, what it recorded.

    ``audit``: "clean" | "syncs" | "allowed" (audited), "not_audited" (no CUDA), "off" (syncguard
    did not audit it: no_syncguard, or it never reached its call phase).
    """

    __test__ = False  # not a pytest test class, despite the name

    nodeid: str
    outcome: str
    audit: str
    reason: str | None = None
    syncs: tuple[SiteRecord, ...] = ()  # inside the code scope, not allowed: these fail a test
    allowed: tuple[SiteRecord, ...] = ()  # inside the code scope, allowed
    races: tuple[RaceEvent, ...] = ()
    duration_s: float = 0.0
    examples: int | None = None
    measurements: Mapping[str, Any] = field(default_factory=dict, hash=False)
    worker: str | None = None
    device: str | None = None
    outside: tuple[SiteRecord, ...] = ()  # outside the code scope: counted, never failing
    events: tuple[SyncEvent, ...] = ()  # every sync event, with --syncguard-keep-events only
    detector_reason: str | None = None  # which detectors ran and why (RegionReport's)
    #: names of the detectors that judged the test (RegionReport's); None where it was not
    #: audited, or its report predates them (schema 4): the gate then cannot compare them
    detectors: tuple[str, ...] | None = None
    #: ``{"detectors": ..., "reason": ...}`` where the test's regions ran weaker detectors than
    #: it asked for (reporting/weaker.py), else None; absent before schema 5
    weaker: Mapping[str, str] | None = field(default=None, hash=False)

    @property
    def audited(self) -> bool:
        return self.audit in AUDITED_STATES

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only: the dict crosses xdist's execnet and lands in the file."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("syncs", "allowed", "outside", "races", "events"):
                value = [e.to_dict() for e in value]
            elif f.name == "measurements":
                value = dict(value)
            elif f.name == "detectors" and value is not None:
                value = list(value)
            elif f.name == "weaker":
                if value is None:  # written only for a marked test (older readers lack it)
                    continue
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "TestEntry":
        """Strict: a report that cannot be read back is a bug worth seeing (SchemaError)."""
        if not isinstance(data, dict) or not isinstance(data.get("nodeid"), str):
            raise SchemaError(f"malformed test entry {str(data)[:80]}")
        if data.get("audit") not in AUDIT_STATES:
            raise SchemaError(f"{data['nodeid']}: audit is {data.get('audit')!r}, not one of "
                              f"{', '.join(AUDIT_STATES)}")
        unknown = set(data) - set(TEST_FIELDS)
        if unknown:
            raise SchemaError(f"{data['nodeid']}: unknown fields {sorted(unknown)}")
        check_fields(cls, data, data["nodeid"])
        weaker = data.get("weaker")
        if weaker is not None and set(weaker) != {"detectors", "reason"}:
            raise SchemaError(f"{data['nodeid']}: weaker has {sorted(weaker)}, not "
                              "['detectors', 'reason']")
        try:
            syncs, allowed, outside = (_records(data.get(k)) for k in ("syncs", "allowed",
                                                                         "outside"))
            return cls(**{**data, "syncs": syncs, "allowed": allowed, "outside": outside,
                          "races": tuple(RaceEvent.from_dict(e) for e in data.get("races") or ()),
                          "events": tuple(SyncEvent.from_dict(e) for e in data.get("events") or ()),
                          "measurements": dict(data.get("measurements") or {}),
                          "detectors": (None if data.get("detectors") is None
                                        else tuple(data["detectors"])),
                          "weaker": None if weaker is None else dict(weaker)})
        except (TypeError, SchemaError) as e:
            raise SchemaError(f"{data['nodeid']}: malformed record ({e})") from None


def _records(items: Any) -> tuple[SiteRecord, ...]:
    """Site records; a version 1 list of events (no ``count``) is aggregated, all in scope."""
    items = list(items or ())
    recs = [SiteRecord.from_dict(d) for d in items if isinstance(d, dict) and "count" in d]
    events = [SyncEvent.from_dict(d) for d in items if not (isinstance(d, dict) and "count" in d)]
    return tuple(recs + aggregate(events)[0])


TEST_FIELDS = tuple(f.name for f in dataclasses.fields(TestEntry))


def environment(import_torch: bool = True) -> dict[str, Any]:
    """Where a run happened; never initialises CUDA when it is absent. ``import_torch=False``:
    torch's part only where something imported it already (see :class:`SessionFile`)."""
    from syncguard import __version__

    env: dict[str, Any] = {
        "torch": None, "torch_git": None, "cuda_runtime": None, "driver": None, "gpu": None,
        "gpu_count": 0, "device": "cpu", "python": platform.python_version(),
        "platform": platform.platform(), "hostname": socket.gethostname(), "syncguard": __version__,
    }
    torch = sys.modules.get("torch")
    if torch is None and import_torch:
        try:
            import torch
        except ImportError:
            pass
    if torch is None:
        return env
    env["torch"] = torch.__version__
    env["torch_git"] = getattr(torch.version, "git_version", None)
    env["cuda_runtime"] = torch.version.cuda
    if torch.cuda.is_available():
        env["device"] = "cuda"
        env["gpu_count"] = torch.cuda.device_count()
        env["gpu"] = torch.cuda.get_device_name(0)
        try:
            env["driver"] = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
        except Exception:  # pragma: no cover - depends on the build
            env["driver"] = None
        if env["driver"] is None:
            env["driver"] = _nvidia_smi_driver()
    return env


def _nvidia_smi_driver() -> str | None:
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def new_document(options: dict[str, Any], env: dict[str, Any] | None = None) -> dict[str, Any]:
    """A session report before its tests: where it ran and what produced it (provenance)."""
    from syncguard.reporting import provenance

    env = env if env is not None else environment()
    return {
        "schema_version": SESSION_SCHEMA_VERSION,
        "kind": "syncguard-session",
        "complete": False,
        "predicted": bool(options.get("predict")),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "provenance": provenance.collect(options.get("detectors") or (), env),
        "options": dict(options),
        "summary": {},
        "frames": [],
        "tests": [],
    }


def is_predicted(doc: Mapping[str, Any]) -> bool:
    """Whether a session report's syncs were predicted (CPU stand-ins, rules measured on a GPU),
    not measured: its ``predicted``; a report written before that field says it in
    ``options.predict`` (``--syncguard-predict``), and one older still did not predict."""
    if isinstance(doc.get("predicted"), bool):
        return doc["predicted"]
    options = doc.get("options")
    return isinstance(options, Mapping) and options.get("predict") is True


def session_detectors(tests: Iterable[TestEntry]) -> str | None:
    """The detector reason most audited tests ran under: the session's, said once (in the
    provenance and the terminal summary); a test's own is kept only where it differs."""
    reasons = Counter(t.detector_reason for t in tests if t.audited and t.detector_reason)
    return reasons.most_common(1)[0][0] if reasons else None


def summarize(tests: Iterable[TestEntry]) -> dict[str, int]:
    tests = list(tests)
    counts = {"tests": len(tests), "audited": 0, "clean": 0, "with_syncs": 0, "allowed": 0,
              "not_audited": 0, "syncs": 0, "outside_scope": 0}
    for t in tests:
        state = t.audit
        if t.audited:
            counts["audited"] += 1
        counts["clean"] += state == "clean"
        counts["with_syncs"] += state == "syncs"
        counts["allowed"] += state == "allowed"
        counts["not_audited"] += state == "not_audited"
        counts["syncs"] += total(t.syncs)
        counts["outside_scope"] += total(t.outside)
    return counts


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask (reading it means setting it: done under a lock, restored at once)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _final_mode(path: Path) -> int:
    """The mode a plain ``open(path, "w")`` would leave: the replaced file's mode, or
    0o666 less the umask for a new file (mkstemp's temp files are 0600)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def write_atomic(path: str | os.PathLike, text: str | bytes) -> None:
    """Write ``text`` (or bytes, as they are) via a temp file in the same folder and rename over
    the target; the result keeps the usual permissions (:func:`_final_mode`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _final_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with (os.fdopen(fd, "wb") if isinstance(text, bytes)
              else os.fdopen(fd, "w", encoding="utf-8")) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def check_writable(path: Path) -> None:
    """Raise OSError (one-line ``strerror``) now if ``path`` could not be written later.

    Why up front: a session report that cannot be written is a usage error, better said before
    an hour of tests than as a traceback after them. Creates the missing folders (the report goes
    there anyway) and a probe file it removes at once; writes nothing else.
    """
    if path.is_dir():
        raise IsADirectoryError(0, f"{path} is a folder, not a file")  # 0: no errno, only words
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(0, f"{parent} is a file, not a folder")
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
    except OSError as e:
        raise OSError(e.errno, f"cannot create a file in {path.parent}: {e.strerror or e}") from None
    os.close(fd)
    os.unlink(probe)


class SessionFile:
    """The report file of one pytest process that writes it (serial run or xdist controller)."""

    def __init__(self, path: Path, options: dict[str, Any], max_stacks: int = MAX_STACKS):
        check_writable(path)
        self.path = path
        # made before collection: torch's part of it is filled in once something imported torch,
        # or at the end (write(final=True)); importing it here changed suites that never do
        # (numpy's pickle test failed, networkx's gained torch's deprecation warnings)
        self.options = options
        self.doc = new_document(options, environment(import_torch=False))
        self.max_stacks = max_stacks
        self.last_write = 0.0
        self.written = False
        self.restorable = True  # what undo() puts back: the file as it was (None: there was none)
        try:
            self.before: bytes | None = path.read_bytes() if path.exists() else None
        except OSError:
            self.before, self.restorable = None, False

    def write(self, tests: Iterable[TestEntry], complete: bool, final: bool = False) -> None:
        """The report as it stands; ``final``: the last write of the run, after every test (an
        xdist controller imports no test module, so it is torch's first import there)."""
        if self.doc["environment"]["torch"] is None and (final or "torch" in sys.modules):
            env = environment(import_torch=final)
            if env["torch"] is not None:
                self.doc.update(new_document(self.options, env),
                                created=self.doc["created"])
        tests = list(tests)
        frames, packed = pack_stacks(tests, self.max_stacks)
        ran = session_detectors(tests)
        self.doc["provenance"]["detectors_ran"] = ran
        for t in packed:  # the session's reason is said once, at the top
            if t.get("detector_reason") in (ran, None):
                t.pop("detector_reason", None)
            if t.get("detectors") is None:  # not audited: nothing judged it
                t.pop("detectors", None)
        self.doc.update(complete=complete, summary=summarize(tests), frames=frames, tests=packed)
        write_atomic(self.path, render_document(self.doc))
        self.written = True
        self.last_write = time.monotonic()

    def undo(self) -> None:
        """The file as it was before this session wrote it: a run that ends in a usage error
        (a bad marker, a path that does not exist) leaves the last good report alone."""
        if not self.written or not self.restorable:
            return
        if self.before is None:
            self.path.unlink(missing_ok=True)
        else:
            write_atomic(self.path, self.before)
        self.written = False

    def write_now_and_then(self, tests: Iterable[TestEntry]) -> None:
        """At most once a second: an interrupted run keeps what it has, as valid JSON."""
        if time.monotonic() - self.last_write > 1.0:
            self.write(tests, complete=False)


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Text of ``path`` parsed as JSON; SchemaError with one line for every way that fails.
    A ``.gz`` path is read through gzip (reports of large suites are committed compressed)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise SchemaError(f"{path}: not a gzip file ({e})") from None
    except FileNotFoundError:
        raise SchemaError(f"{path}: {what} not found") from None
    except OSError as e:
        raise SchemaError(f"{path}: cannot read {what} ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise SchemaError(f"{path}: not a JSON text file (byte {e.start} is not UTF-8)") from None
    return parse_json(text, str(path))


def render_document(doc: dict[str, Any]) -> str:
    """The document as JSON text: the header indented, then one line per frame and per test.

    Why not ``indent=1`` throughout: it spends a line on every list item, which doubled the size
    of a large report (bench/bench_report_size.py); one line per test keeps diffs per test.
    """
    head = json.dumps({k: v for k, v in doc.items() if k not in ("frames", "tests")}, indent=1)

    def block(name: str) -> str:
        return f' "{name}": [' + ",".join(
            "\n  " + json.dumps(x, separators=(",", ":")) for x in doc.get(name, [])) + "]"

    return head[:-2] + ",\n" + block("frames") + ",\n" + block("tests") + "\n}\n"


def pack_stacks(tests: Iterable[TestEntry], max_stacks: int = MAX_STACKS
                ) -> tuple[list[str], list[dict[str, Any]]]:
    """(frame table, test dicts whose records' stacks index it); records past ``max_stacks``
    (counted in test order) keep no stack. Events kept with --syncguard-keep-events stay inline."""
    table: dict[str, int] = {}
    kept = 0
    out = []
    for t in tests:
        d = t.to_dict()
        for key in ("syncs", "allowed", "outside"):
            for rec in d[key]:
                if rec["stack"] and kept < max_stacks:
                    rec["stack"] = [table.setdefault(f, len(table)) for f in rec["stack"]]
                    kept += 1
                else:
                    rec["stack"] = []
        out.append(d)
    return list(table), out


def _unpack_stacks(doc: dict[str, Any]) -> None:
    frames = doc.get("frames") or []
    if not isinstance(frames, list):
        raise SchemaError("'frames' is not a list")
    for t in doc["tests"]:
        for key in ("syncs", "allowed", "outside"):
            recs = t.get(key) if isinstance(t, dict) else None
            for rec in recs if isinstance(recs, list) else []:  # other shapes: validation says so
                stack = rec.get("stack") if isinstance(rec, dict) and "count" in rec else None
                if isinstance(stack, list) and stack and all(isinstance(i, int) for i in stack):
                    if not all(0 <= i < len(frames) for i in stack):
                        raise SchemaError(f"{t.get('nodeid')}: a stack names a frame past the "
                                          f"{len(frames)} in 'frames'")
                    rec["stack"] = [frames[i] for i in stack]


def load_document(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate one session report; raises SchemaError with a one-line reason.

    ``doc["tests"]`` comes back as a list of :class:`TestEntry`, stacks as frame strings; a
    version 1 document comes back in version 2's shape.
    """
    path = Path(path)
    doc = read_json(path, "session report")
    try:
        check_schema(doc, "session report", READS)
        if doc.get("kind") != "syncguard-session":
            raise SchemaError(f"kind is {doc.get('kind')!r}, not 'syncguard-session'")
        for key in ("environment", "tests"):
            if key not in doc:
                raise SchemaError(f"missing {key!r}")
        if not isinstance(doc["tests"], list):
            raise SchemaError("'tests' is not a list")
        _check_header(doc)
        _unpack_stacks(doc)
        ran = (doc.get("provenance") or {}).get("detectors_ran")
        doc["tests"] = [TestEntry.from_dict({"detector_reason": ran, **t}) if ran and
                        isinstance(t, dict) and t.get("audit") in AUDITED_STATES
                        else TestEntry.from_dict(t)
                        for t in doc["tests"]]
        _check_total(doc["tests"])
        doc["schema_version"], doc["frames"] = SESSION_SCHEMA_VERSION, []
    except SchemaError as e:
        raise SchemaError(f"{path}: {e}") from None
    return doc


def _check_total(tests: list[TestEntry]) -> None:
    """SchemaError naming the record whose count takes the report past
    :data:`~syncguard.records.schema.MAX_SYNCS` (why a maximum: there). Counts are only added here,
    never expanded; a record's phases add up to its count (SiteRecord.from_dict), so nothing a
    reader expands is bigger than the counts checked."""
    most, held = schema.MAX_SYNCS, 0
    for t in tests:
        for key in ("syncs", "allowed", "outside"):
            for i, rec in enumerate(getattr(t, key)):
                held += rec.count
                if held > most:
                    raise SchemaError(f"{t.nodeid}: {key}[{i}]: count {rec.count} takes the "
                                      f"report to more than the {most} syncs a report holds")


_TEXT_FIELDS = ("torch", "torch_git", "cuda_runtime", "driver", "gpu", "device", "python",
                "platform", "hostname", "syncguard")


def _check_header(doc: dict[str, Any]) -> None:
    """The fields the matrix reads besides the tests, with the types it reads them as."""
    env = doc["environment"]
    if not isinstance(env, dict):
        raise SchemaError("'environment' is not an object")
    for key in _TEXT_FIELDS:
        if env.get(key) is not None and not isinstance(env[key], str):
            raise SchemaError(f"environment.{key} is {env[key]!r}, not a string or null")
    if env.get("device") not in (None, "cpu", "cuda"):
        raise SchemaError(f"environment.device is {env['device']!r}, not 'cpu' or 'cuda'")
    if "provenance" in doc and not isinstance(doc["provenance"], dict):
        raise SchemaError("'provenance' is not an object")
    check_types(doc.get("provenance") or {}, {"detectors_ran": "str | None"}, "provenance")
    for key in ("complete", "predicted"):
        if not isinstance(doc.get(key, True), bool):
            raise SchemaError(f"{key!r} is {doc[key]!r}, not true or false")


def run_label(doc: dict[str, Any]) -> str:
    """The column a run gets in the matrix: torch version × device."""
    env = doc.get("environment", {})
    torch_v = env.get("torch") or "?"
    dev = env.get("gpu") if env.get("device") == "cuda" else "cpu"
    return f"torch {torch_v} · {dev or env.get('device') or '?'}"


