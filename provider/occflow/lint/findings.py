"""Lint findings: one per table and unordered pair of tasks, classified by what would happen.

``collisions`` (``occflow.lint.planning``) lists every pair of declared writes, mapped instances
apart, that can run together and that a matrix says conflict. A reviewer wants one line per
pair of *tasks* on one table, so the instances of a mapped task are folded into their task
(four upserts against one compaction are one finding, with the four footprints listed). Each
finding is then classified:

- ``corrupts_data`` (error): both would commit and the data is wrong, and nothing keeps them apart;
- ``conflict`` (warning): one of the two fails, and nothing keeps them apart;
- ``serialized`` (info): either of the above, but both tasks take admission leases from one
  store and admission's matrix keeps them apart: occflow runs them one at a time.

A pair where only one side takes a lease is not protected: the other side writes whenever it runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..core.profiles import operations_conflict
from .planning import Collision, DeclaredTask, Evidence, FindingKind, collisions

FINGERPRINT_VERSION = "occflow-lint-1"


@dataclass(frozen=True)
class Suppression:
    """Why a finding is not counted: a pragma in the DAG file or an entry in the lint config."""

    by: str  # "pragma" or "config"
    where: str  # file:line of the pragma, or the config file
    task: str  # dag_id.task_id it was attached to
    kinds: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"by": self.by, "where": self.where, "task": self.task, "kinds": list(self.kinds),
                "reason": self.reason}


@dataclass(frozen=True)
class Finding:
    """A pair of tasks (or one task with itself) on one table that can run together and collide."""

    kind: FindingKind
    would_be: FindingKind  # the kind without admission: corrupts_data or conflict
    tasks: tuple[DeclaredTask, ...]  # one declared task per side (the first instance of a mapped one)
    table: str
    evidence: tuple[Evidence, ...]
    footprints: tuple[str, ...]
    together: tuple[str, ...]
    protection: str  # what admission does (or why it does not protect the pair)
    suppression: Suppression | None = None
    in_baseline: bool = False

    @property
    def idents(self) -> tuple[str, ...]:
        return tuple(sorted({t.base_ident for t in self.tasks}))

    @property
    def dag_ids(self) -> tuple[str, ...]:
        return tuple(sorted({t.dag_id for t in self.tasks}))

    @property
    def protected(self) -> bool:
        return self.kind is FindingKind.SERIALIZED

    @property
    def new(self) -> bool:
        """An unprotected finding that is neither suppressed nor in the baseline: fails the lint."""
        return not self.protected and self.suppression is None and not self.in_baseline

    @property
    def fingerprint(self) -> str:
        """Stable across edits that move lines: DAG and task ids, table and kind only."""
        key = json.dumps([FINGERPRINT_VERSION, self.table, list(self.idents), self.kind.value])
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def effects(self) -> str:
        """The matrix cells, one clause each: ``optimize then merge -> merge fails (concurrent_append)``."""
        return "; ".join(_cell_text(e) for e in self.evidence)

    @property
    def reason(self) -> str:
        what = ("both commit and the data is wrong" if self.would_be is FindingKind.CORRUPTS_DATA
                else "one of the two fails")
        return (f"{what}: {self.effects()}. {self.protection}. Together because: {'; '.join(self.together)}")

    def with_status(self, suppression: Suppression | None, in_baseline: bool) -> Finding:
        return replace(self, suppression=suppression, in_baseline=in_baseline)

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "severity": self.kind.severity,
            "dag_id": self.dag_ids[0],
            "dag_ids": list(self.dag_ids),
            "tasks": list(self.idents),
            "table": self.table,
            "operations": sorted({t.write.operation.value for t in self.tasks}),
            "cells": [e.to_dict() for e in self.evidence],
            "footprints": list(self.footprints),
            "together": list(self.together),
            "reason": self.reason,
            "protected": self.protected,
            "would_be": self.would_be.value,
            "suppressed": self.suppression is not None,
            "suppression": self.suppression.to_dict() if self.suppression else None,
            "in_baseline": self.in_baseline,
            "new": self.new,
            "fingerprint": self.fingerprint,
            "sources": sorted({t.source for t in self.tasks if t.source}),
        }


def _cell_text(e: Evidence) -> str:
    c = e.cell
    outcome = (f"{c.later.value} fails ({c.exception.value if c.exception else '-'})" if c.later_fails
               else f"both commit, {c.effect.value}")
    return f"{c.earlier.value} then {c.later.value} -> {outcome} [{e.profile.name}]"


def admission_keeps_apart(a: DeclaredTask, b: DeclaredTask) -> bool:
    """Whether admission refuses to run the two leases together: admission's own rule
    (``occflow.core.profiles.operations_conflict``) on each task's admission matrix."""
    return operations_conflict(a.admission_profile, a.write.operation, b.admission_profile, b.write.operation)


def protection(a: DeclaredTask, b: DeclaredTask) -> tuple[bool, str]:
    """Whether admission serializes the pair, and the sentence that says why (not)."""
    for t in (a, b):
        if not t.admission:
            how = ("admission=False" if t.engine else "not an occflow write operator: it takes no lease")
            return False, f"Nothing keeps them apart: {t.base_ident} runs without admission ({how})"
    if a.lease_store != b.lease_store:
        stores = " and ".join(repr(s or "the default store") for s in (a.lease_store, b.lease_store))
        return False, f"Nothing keeps them apart: their leases live in different stores ({stores})"
    if not admission_keeps_apart(a, b):
        names = "/".join(sorted({a.admission_profile.name, b.admission_profile.name}))
        return False, f"Nothing keeps them apart: admission's matrix ({names}) lets them run together"
    return True, "Admission serializes them: both take leases from one store and their claims block each other"


def _fold(group: list[Collision]) -> Finding:
    """One finding from the collisions of one table and pair of tasks (instances folded)."""
    evidence: list[Evidence] = []
    for e in (e for c in group for e in c.evidence):
        if e not in evidence:
            evidence.append(e)
    footprints = tuple(sorted({c.footprint for c in group}))
    together = tuple(dict.fromkeys(c.why_together for c in group))
    verdicts = [protection(c.first, c.second) for c in group]
    unprotected = [why for ok, why in verdicts if not ok]
    would_be = (FindingKind.CORRUPTS_DATA if any(e.corrupts_data for e in evidence) else FindingKind.CONFLICT)
    kind = would_be if unprotected else FindingKind.SERIALIZED
    first = group[0]
    sides = (first.first,) if first.first.base_ident == first.second.base_ident else (first.first, first.second)
    return Finding(kind, would_be, sides, first.first.write.table, tuple(evidence), footprints, together,
                   unprotected[0] if unprotected else verdicts[0][1])


def findings(tasks: Sequence[DeclaredTask], window: float = 3600.0) -> list[Finding]:
    """One finding per table and unordered pair of tasks: errors, then warnings, then info."""
    return fold(collisions(tasks, window))


def fold(found: Sequence[Collision]) -> list[Finding]:
    """The findings of ``collisions``' per-instance pairs (see ``findings``)."""
    groups: dict[tuple[str, tuple[str, ...]], list[Collision]] = {}
    for c in found:
        key = (c.first.write.table, tuple(sorted({c.first.base_ident, c.second.base_ident})))
        groups.setdefault(key, []).append(c)
    order = list(FindingKind)
    folded = [_fold(group) for group in groups.values()]
    return sorted(folded, key=lambda f: (order.index(f.kind), f.table, f.idents))
