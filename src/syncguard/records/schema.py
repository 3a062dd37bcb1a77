"""What a JSON document syncguard reads must hold, checked where it is read.

Why a module of its own: every reader (session reports, baselines, region reports, atlas runs)
turns bad input into the same one-line :class:`SchemaError` naming the file and the field, and a
from_dict that passed a value on unchecked failed only where it was used (a matrix cell, a
phrase, a sum), as a traceback far from the file. The typed records' from_dict constructors call
:func:`check_fields` before building.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from typing import Any, Callable, Iterable, Mapping

SCHEMA_VERSION = 1  # of a region report and its events (events.py); other documents have theirs


class SchemaError(ValueError):
    """A JSON document is not one syncguard can read."""


#: The most syncs one session report holds: its site records' ``count``, every test's syncs,
#: allowed syncs and syncs outside the scope together (a baseline entry, one report's case, no
#: more). A document claiming more is refused in one line (sessionfile.load_document,
#: baseline.check).
#:
#: Why a maximum: a count is work for every tool that reads it. ``--format json`` lists one
#: phrase per sync, so a report claiming an absurd count at one site, accepted because a count
#: only had to fit an int64, would exhaust memory instead of being an error.
#:
#: Why ten million: no run syncguard records comes near it. Each sync is a host<->device
#: round trip, and recording one costs the audited process more (its detector callback, its
#: stack walk and its aggregation, even with the cheapest detector), so ten million is minutes
#: of a session doing nothing but sync, far beyond any report committed here. A report claiming
#: more is damaged, or not syncguard's.
MAX_SYNCS = 10_000_000


def parse_json(text: str, where: str) -> Any:
    """``json.loads`` with the one message syncguard gives for text that is not JSON.

    Besides JSONDecodeError, json.loads raises a plain ValueError for an integer of more than
    4300 digits and RecursionError for arrays nested past the recursion limit: both are input
    that is not a document, said the same way."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"{where}: not valid JSON (truncated?): {e.msg} at line {e.lineno}") from None
    except (ValueError, RecursionError) as e:
        raise SchemaError(f"{where}: not a JSON document syncguard can read "
                          f"({str(e).split(';')[0]})") from None


def check_schema(data: Any, what: str = "document", reads: Iterable[int] = (SCHEMA_VERSION,)
                 ) -> None:
    """``data`` is an object whose ``schema_version`` is one of ``reads``: an integer, since
    ``true == 1`` and ``1.0 == 1`` in Python would pass a plain comparison."""
    if not isinstance(data, dict):
        raise SchemaError(f"{what} is not a JSON object")
    version, reads = data.get("schema_version"), tuple(reads)
    if type(version) is not int or version not in reads:
        raise SchemaError(f"{what} has schema_version {version!r}; this syncguard reads "
                          f"{', '.join(map(str, reads))}")


# -- field types --------------------------------------------------------------------------------
# Why: a from_dict that passes a value on unchecked fails only where it is used (a matrix cell,
# a phrase, a sum), as a traceback far from the file. Checked where a document is read, the one
# line names the file and the field.

def _finite(v: Any) -> bool:
    """A JSON number that is a float with a finite value (an integer past 1e308 is not)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _whole(v: Any, low: int = -2**63) -> bool:
    """An integer a C int64 holds (no bool); ``low=0`` for counts."""
    return type(v) is int and low <= v < 2**63


def _json_numbers_finite(v: Any) -> bool:
    """Every number at any depth is :func:`_finite` (iterative: a document nested as deep as
    the JSON reader allows must not overflow the stack here)."""
    todo = [v]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            todo += x.values()
        elif isinstance(x, list):
            todo += x
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and not _finite(x):
            return False
    return True


def _each(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(map(test, v))


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _list(v: Any) -> bool:
    return isinstance(v, list)


def _dict(v: Any) -> bool:
    return isinstance(v, dict)


def _or_null(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or test(v)


#: (test, words) for each field type, keyed by the annotation as written (``from __future__
#: import annotations`` keeps it as text); a list of nested records is checked to be a list
#: here and record by record by its own from_dict. A field whose annotation is missing here
#: fails the first test that reads one (KeyError), so no new field goes unchecked.
VALUE_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (_str, "a string"),
    "str | None": (_or_null(_str), "a string or null"),
    "int": (functools.partial(_whole, low=0), "a count (a whole number from 0)"),
    "int | None": (_or_null(_whole), "an integer or null"),
    "float": (_finite, "a finite number"),
    "float | None": (_or_null(_finite), "a finite number or null"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "tuple[str, ...]": (_each(_str), "a list of strings"),
    "tuple[str, ...] | None": (_or_null(_each(_str)), "a list of strings or null"),
    "list[str]": (_each(_str), "a list of strings"),
    "tuple[int, ...]": (_each(_whole), "a list of integers"),
    # frames: text in a file ("file:line in function"), records.frame.Frame once read
    "tuple[Frame | str, ...]": (_each(_str), "a list of strings"),
    "Frame | str | None": (_or_null(_str), "a string or null"),
    "Mapping[str, int]": (lambda v: _dict(v) and all(_whole(n, low=0) for n in v.values()),
                          "an object of counts"),
    "Mapping[str, Any]": (lambda v: _dict(v) and _json_numbers_finite(v),
                          "an object (of finite numbers)"),
    "Mapping[str, str] | None": (_or_null(lambda v: _dict(v) and all(map(_str, v.values()))),
                                 "an object of strings or null"),
    "dict": (_dict, "an object"),
    "dict | None": (_or_null(_dict), "an object or null"),
    "list": (_list, "a list"),
    **dict.fromkeys(("list[SyncEvent]", "list[RaceEvent]", "tuple[SiteRecord, ...]",
                     "tuple[RaceEvent, ...]", "tuple[SyncEvent, ...]"), (_list, "a list")),
}


def check_types(data: Mapping[str, Any], types: Mapping[str, str], what: str,
                required: Iterable[str] = ()) -> None:
    """SchemaError naming the first of ``required`` that ``data`` lacks, or the first field of
    ``types`` (name -> annotation text, :data:`VALUE_TYPES`) whose value is not of that type."""
    if not _dict(data):
        raise SchemaError(f"{what} is {_shown(data)}, not an object")
    for name in required:
        if name not in data:
            raise SchemaError(f"{what} has no {name!r}")
    for name, annotation in types.items():
        test, words = VALUE_TYPES[annotation]
        if name in data and not test(data[name]):
            raise SchemaError(f"{what}: {name} is {_shown(data[name])}, not {words}")


def _shown(value: Any) -> str:
    """A value as an error quotes it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@functools.cache
def _declared(cls: type) -> tuple[dict[str, str], tuple[str, ...]]:
    """(field -> annotation, fields without a default) of a dataclass."""
    fields = dataclasses.fields(cls)
    return ({f.name: f.type for f in fields},  # type: ignore[misc]
            tuple(f.name for f in fields if f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING))


def check_fields(cls: type, data: Mapping[str, Any], what: str) -> None:
    """:func:`check_types` with the fields a dataclass declares: the typed from_dict
    constructors call it before building, so a wrong type never reaches ``cls(**data)``."""
    types, required = _declared(cls)
    check_types(data, types, what, required)
