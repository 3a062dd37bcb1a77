"""The rules table: which operations make the host wait, keyed by op and argument facts, per
measured torch version. The table is data (``rules.json``), derived from committed GPU runs by
``tools/predict_rules.py``; this module only reads it and answers look-ups.

Why "nearest measured version" rather than ranges typed by hand: a range boundary is a claim
that needs a run on each side of it. The table records, per key, what each measured torch did;
a look-up for another version uses the nearest measured one and says which (the note on every
predicted event), so an unmeasured boundary (e.g. 2.9, between 2.8.0 and 2.11.0) shows up as a
named guess, not as a silent fact. A later GPU run adds versions or keys by re-deriving.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping


def op_name(func) -> str:
    """``aten::name`` or ``aten::name.overload``: the profiler's spelling plus the overload
    where it is not ``default``."""
    schema_name = func._schema.name  # e.g. "aten::index"
    overload = func._overloadname
    return schema_name if overload == "default" else f"{schema_name}.{overload}"

__all__ = ["RULES_PATH", "RULES_KIND", "Verdict", "RuleTable", "load_rules", "fact_key",
           "version_tuple", "MODELLED_FACTS"]

RULES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rules.json")
RULES_KIND = "syncguard-predict-rules"
RULES_SCHEMA = 1

#: The argument facts the predictor extracts (documentation for the table's readers; the
#: extraction lives in facts.py).
MODELLED_FACTS = {
    "mask": "bool/uint8 index tensor of an index op: 'cpu' or 'cuda'",
    "index": "integer index tensor of an index op: 'cpu' or 'cuda'",
    "accumulate": "index_put's accumulate flag",
    "deterministic": "index op under torch.use_deterministic_algorithms(True) (absent: off)",
    "output_size": "repeat_interleave: 'given' or 'absent'",
    "range": "histc: 'given', or 'absent' (min == max: read from the data)",
    "values": "index_put with a mask: 'host_scalar' for a one-element host value (absent: "
              "anything else)",
    "sparse": "an argument is a sparse tensor (absent: every argument is dense)",
    "slice_size": "mode: the length of the reduced dimension (only measured lengths match)",
    "direction": "copy between host and device: 'h2d', 'd2h' or 'd2d'",
    "host": "host side of a copy: 'pinned' or 'pageable'",
    "non_blocking": "the copy's non_blocking flag",
    "cached_free": "empty_cache(): device blocks were freed into the cache since the last one",
}


def version_tuple(version: str) -> tuple[int, int, int]:
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if not m:
        raise ValueError(f"cannot read a torch version from {version!r}")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def fact_key(op: str, facts: Mapping[str, Any]) -> str:
    """One stable string per (op, facts): the table's key."""
    inner = ",".join(f"{k}={facts[k]}" for k in sorted(facts))
    return f"{op}[{inner}]"


@dataclass(frozen=True)
class Verdict:
    """What the table says about one op call."""

    status: str  # "rule" (measured key), "class" (measured class of ops), "unmodelled"
    syncs: tuple[Mapping[str, Any], ...] = ()  # each {"kind", "api", "via"}
    torch: str | None = None  # the measured torch version whose rules were used
    evidence: tuple[str, ...] = ()
    why: str | None = None  # for "unmodelled"


@dataclass
class RuleTable:
    """Rules keyed by :func:`fact_key`; each maps a measured torch version to its syncs."""

    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    #: snippets of a run no rule was learned from, and why (data, so a reader sees the gaps)
    not_learned: list[str] = field(default_factory=list)

    @property
    def versions(self) -> list[str]:
        seen = {v for r in self.rules.values() for v in r["torch"]}
        return sorted(seen, key=version_tuple)

    def nearest(self, measured: list[str], target: str) -> str | None:
        """The measured version nearest to ``target`` (minor steps; ties go to the older)."""
        if not measured:
            return None
        t = version_tuple(target)

        def distance(v: str) -> tuple[int, int]:
            m = version_tuple(v)
            return (abs((m[0] * 1000 + m[1]) - (t[0] * 1000 + t[1])), abs(m[2] - t[2])), m

        return min(measured, key=distance)

    def lookup(self, op: str, facts: Mapping[str, Any], target: str, *,
               device_kernel: bool = False) -> Verdict:
        """The verdict for ``op`` with ``facts`` on torch ``target``. ``device_kernel`` says
        the call is of the measured class "every tensor on the device, static output shape"."""
        rule = self.rules.get(fact_key(op, facts))
        if rule is not None:
            return self._verdict("rule", rule, target)
        if device_kernel and "device_kernel" in self.classes:
            return self._verdict("class", self.classes["device_kernel"], target)
        known = sorted(k for k in self.rules if k.startswith(op + "["))
        why = f"{fact_key(op, facts)}: no committed GPU run measured this op with these facts"
        if known:
            why += f" (measured: {', '.join(known)})"
        return Verdict("unmodelled", why=why)

    def _verdict(self, status: str, rule: Mapping[str, Any], target: str) -> Verdict:
        per = rule["torch"]
        version = self.nearest(list(per), target)
        entry = per[version]
        return Verdict(status, tuple(entry["syncs"]), version, tuple(entry.get("evidence", ())))

    # -----------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"schema_version": RULES_SCHEMA, "kind": RULES_KIND,
                "generated_by": "tools/predict_rules.py derive (do not edit by hand)",
                "facts": MODELLED_FACTS, "sources": self.sources,
                "not_learned": self.not_learned,
                "classes": {k: self.classes[k] for k in sorted(self.classes)},
                "rules": {k: self.rules[k] for k in sorted(self.rules)}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Any, where: str = "rules") -> "RuleTable":
        if not isinstance(data, dict) or data.get("kind") != RULES_KIND:
            raise ValueError(f"{where} is not a syncguard predict rules table")
        if data.get("schema_version") != RULES_SCHEMA:
            raise ValueError(f"{where} has schema_version {data.get('schema_version')!r}; "
                             f"this syncguard reads {RULES_SCHEMA}")
        for name, kind in (("rules", dict), ("classes", dict), ("sources", list),
                           ("not_learned", list)):
            if not isinstance(data.get(name, kind()), kind):
                raise ValueError(f"{where}: {name!r} must be a JSON "
                                 f"{'object' if kind is dict else 'array'}, not "
                                 f"{type(data[name]).__name__}")
        rules, classes = data.get("rules", {}), data.get("classes", {})
        for section, table in (("rules", rules), ("classes", classes)):
            for key, rule in table.items():
                _check_rule(rule, f"{where}: {section}[{key!r}]")
        return cls(dict(rules), dict(classes), list(data.get("sources", [])),
                   list(data.get("not_learned", [])))


def _check_rule(rule: Any, at: str) -> None:
    """One rule's shape, checked at load so that a malformed table fails here, naming the
    field, rather than as a KeyError/TypeError at the user's first op that looks it up."""
    if not isinstance(rule, dict):
        raise ValueError(f"{at} must be an object, not {type(rule).__name__}")
    per = rule.get("torch")
    if not isinstance(per, dict) or not per:
        raise ValueError(f"{at}['torch'] must be a non-empty object of torch version -> entry")
    for version, entry in per.items():
        here = f"{at}['torch'][{version!r}]"
        try:
            version_tuple(version)
        except ValueError:
            raise ValueError(f"{here}: {version!r} is not a torch version") from None
        if not isinstance(entry, dict):
            raise ValueError(f"{here} must be an object, not {type(entry).__name__}")
        syncs = entry.get("syncs")
        if not isinstance(syncs, list):
            raise ValueError(f"{here}['syncs'] is missing or not an array" if syncs is None
                             else f"{here}['syncs'] must be an array, not "
                                  f"{type(syncs).__name__}")
        for i, sync in enumerate(syncs):
            if not (isinstance(sync, dict) and isinstance(sync.get("kind"), str)
                    and isinstance(sync.get("api"), str)):
                raise ValueError(f"{here}['syncs'][{i}] must be an object with string 'kind' "
                                 "and 'api'")
        evidence = entry.get("evidence", [])
        if not isinstance(evidence, list):
            raise ValueError(f"{here}['evidence'] must be an array, not "
                             f"{type(evidence).__name__}")


_cache: dict[str, RuleTable] = {}


def load_rules(path: str | None = None) -> RuleTable:
    """The table at ``path`` (default: the packaged rules.json), read once per path."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"rules must be a RuleTable or a path to a rules table, not "
                        f"{type(path).__name__}")
    path = os.path.abspath(path or RULES_PATH)
    if path not in _cache:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise ValueError(f"no predict rules table at {path}; run tools/predict_rules.py "
                             "derive") from None
        except IsADirectoryError:
            raise ValueError(f"predict rules table {path} is a folder, not a JSON file") \
                from None
        except UnicodeDecodeError as e:
            raise ValueError(f"predict rules table {path} is not UTF-8 text: {e}") from None
        except OSError as e:
            raise ValueError(f"cannot read predict rules table {path}: "
                             f"{e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"predict rules table {path} is not valid JSON: {e}") from None
        _cache[path] = RuleTable.from_dict(data, path)
    return _cache[path]
