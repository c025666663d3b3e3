"""Static analysis of declared writes: which tasks can collide (lint) and which plain Airflow
pools would keep them apart (pools plan). Pure Python over ``DeclaredTask`` records; reading
them out of a DAG folder is ``occflow.lint.dagscan``.

Two declared writes collide when (1) they can run at the same time, (2) their footprints may
overlap and (3) a matrix says one of them would fail, or that both would commit and corrupt the
data (``Effect.corrupts_data``: delta-rs's two compactions of one partition). The matrices asked
are each task's declared profile and, where the engine that really commits the write has an
observed matrix of its own (a profile named after it: ``delta-rs``), that one too: a declared
profile does not change what the engine does. Partition values that are Jinja templates are
only known at run time, so they may overlap anything, except that one task's templated
footprint in two runs of its DAG is taken to differ per run (``{{ ds }}``).
"""

from __future__ import annotations

import bisect
import enum
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from ..core.declaration import WriteDeclaration
from ..core.errors import OccflowError
from ..core.footprint import overlapping_specs
from ..core.identifiers import table_identities
from ..core.profiles import PROFILES, Cell, Profile

_TEMPLATE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}")


@dataclass(frozen=True)
class DeclaredTask:
    """One task's declared write and what decides when it can run."""

    dag_id: str
    task_id: str
    write: WriteDeclaration
    upstream: frozenset[str] = frozenset()  # every task id upstream in the same DAG
    max_active_runs: int = 1
    # Seconds (from a common reference) when the DAG's runs start; None = not time-scheduled.
    firings: tuple[float, ...] | None = ()
    schedule: str = ""
    pool: str | None = None
    # The engine that really commits the write (the operator's ``engine_name``), if known.
    engine: str | None = None
    # Whether the task takes an admission lease before writing (occflow's operators, unless
    # ``admission=False``), and from which lease store (``None``: the configured default).
    admission: bool = False
    lease_store: str | None = None
    source: str | None = None  # the DAG file
    map_index: int | None = None  # a mapped task's instance (``task_id`` then ends in ``[i]``)
    # A mapped task whose one record stands for every instance of a run: mapped over an upstream
    # result (its footprints unknown until the run) or over arguments that leave the footprint.
    mapped_unknown: bool = False
    # The task's own concurrency limits (Airflow's ``max_active_tis_per_dag`` / ``..._dagrun``).
    max_active_tis_per_dag: int | None = None
    max_active_tis_per_dagrun: int | None = None
    #: Where the table's name leads when the write names no location and its engine derives one
    #: from the name (delta-rs without ``path``), as the operator resolves it
    #: (``with_name_locations``): a hand-made declaration of ``lake.t`` meets the operator's write
    #: of ``lake.t``, which is keyed by that location.
    name_location: str | None = None

    @property
    def identities(self) -> frozenset[str]:
        """The keys the task's table is known by (``core.identifiers.table_identities``)."""
        return _identities(self.write, self.name_location)

    @property
    def ident(self) -> str:
        return f"{self.dag_id}.{self.task_id}"

    @property
    def base_task_id(self) -> str:
        """The task as the DAG names it: a mapped instance's task without its ``[i]``."""
        return self.task_id if self.map_index is None else self.task_id.rsplit("[", 1)[0]

    @property
    def base_ident(self) -> str:
        return f"{self.dag_id}.{self.base_task_id}"

    @property
    def admission_profile(self) -> Profile:
        """The matrix admission applies to this task's lease: the engine's own, else the declared."""
        if self.write.engine_profile:
            return PROFILES[self.write.engine_profile]
        return self.engine_profile or self.write.profile

    @property
    def engine_profile(self) -> Profile | None:
        """The engine's own observed matrix, if it has one (a profile named after the engine)."""
        return PROFILES.get(self.engine) if self.engine else None

    @property
    def profile_mismatch(self) -> str | None:
        """Why the declared profile is not the whole story for this task, or None."""
        engine = self.engine_profile
        if engine is None or engine == self.write.profile:
            return None
        return (f"{self.ident} runs on {self.engine}: its profile {self.write.profile.name!r} does not "
                f"describe that engine, so the {engine.name!r} matrix is applied as well")

    @property
    def runs_overlap(self) -> bool:
        """Whether two runs of the DAG can each run this task at once."""
        return self.max_active_runs > 1 and self.max_active_tis_per_dag != 1

    @property
    def instances_side_by_side(self) -> bool:
        """Whether instances of this mapped task run side by side within one run."""
        return self.max_active_tis_per_dagrun != 1 and self.max_active_tis_per_dag != 1

    @property
    def templated(self) -> bool:
        return any(_TEMPLATE.search(str(v)) for p in self.write.partitions or () for v in p.values())


class FindingKind(str, enum.Enum):
    """How bad a colliding pair is; findings are listed in this order."""

    CORRUPTS_DATA = "corrupts_data"  # both commit and the data is wrong: must never run together
    CONFLICT = "conflict"  # one of the two fails (and retries, reschedules or is lost)
    SERIALIZED = "serialized"  # either of the above, but admission runs the two one at a time

    @property
    def severity(self) -> str:
        return {"corrupts_data": "error", "conflict": "warning", "serialized": "info"}[self.value]


@dataclass(frozen=True)
class Evidence:
    """One matrix cell that makes a pair a finding, with the profile whose matrix holds it."""

    profile: Profile
    cell: Cell

    @property
    def corrupts_data(self) -> bool:
        return self.cell.effect.corrupts_data

    def describe(self) -> str:
        c = self.cell
        outcome = (f"later fails with {c.exception.value if c.exception else '-'}" if c.later_fails
                   else f"both commit, {c.effect.value}")
        return f"{self.profile.name}: {c.earlier.value} then {c.later.value} -> {outcome} ({c.source})"

    def to_dict(self) -> dict[str, object]:
        return {"profile": self.profile.name, **self.cell.to_dict()}


@dataclass(frozen=True)
class Collision:
    """A pair of tasks that can run together and would conflict, with the cells that say so."""

    first: DeclaredTask
    second: DeclaredTask
    why_together: str
    footprint: str
    evidence: tuple[Evidence, ...]

    @property
    def cells(self) -> tuple[Cell, ...]:
        return tuple(e.cell for e in self.evidence)

    @property
    def kind(self) -> FindingKind:
        if any(e.corrupts_data for e in self.evidence):
            return FindingKind.CORRUPTS_DATA
        return FindingKind.CONFLICT

    @property
    def notes(self) -> tuple[str, ...]:
        tasks = (self.first,) if self.first.ident == self.second.ident else (self.first, self.second)
        return tuple(note for note in (t.profile_mismatch for t in tasks) if note is not None)

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "first": self.first.ident,
            "second": self.second.ident,
            "table": self.first.write.table,
            "operations": [self.first.write.operation.value, self.second.write.operation.value],
            "profile": self.first.write.profile.name,
            "effects": sorted({e.cell.effect.value for e in self.evidence}),
            "why_together": self.why_together,
            "footprint": self.footprint,
            "cells": [e.to_dict() for e in self.evidence],
            "notes": list(self.notes),
        }


def _value_match(a: object, b: object) -> bool:
    return a == b or bool(_TEMPLATE.search(str(a))) or bool(_TEMPLATE.search(str(b)))


def _identities(declared: WriteDeclaration, name_location: str | None = None) -> frozenset[str]:
    """The table as admission knows it (a delta-rs table's location, else its canonical name, and
    the location that name leads to where the engine derives one): one table under two spellings
    of its name, or two names for one path, is one table here too. A name still holding a
    template is compared as written."""
    try:
        return table_identities(declared.table, declared.catalog, declared.location, name_location)
    except OccflowError:
        return frozenset({declared.table})


def footprint_overlap(a: WriteDeclaration, b: WriteDeclaration, same_table: bool | None = None) -> str | None:
    """How two declared footprints may overlap, or None if they cannot. ``same_table``: whether
    they are one table, when the caller knows more than the declarations (``DeclaredTask``)."""
    if not (bool(_identities(a) & _identities(b)) if same_table is None else same_table):
        return None
    if not a.partitions or not b.partitions:
        return "whole table"
    pair = overlapping_specs(a.partitions, b.partitions, same=_value_match)
    if pair is None:
        return None
    pa, pb = pair
    shown = "/".join(f"{k}={pa[k]}" for k in sorted(pa))
    return f"partition {shown}" + ("" if dict(pa) == dict(pb) else f" ~ {'/'.join(f'{k}={pb[k]}' for k in sorted(pb))}")


def with_name_locations(tasks: Sequence[DeclaredTask], locate: Callable[[str], str | None]) -> tuple[DeclaredTask, ...]:
    """The tasks, each hand-made Delta declaration that names no location keyed also by where
    ``locate`` (the operator's own resolution of a name: ``occflow.cli.lint``) says its name
    leads. Only declarations no occflow operator made (``engine`` unknown): an operator's
    declaration already carries its location when it is known, and one whose ``path`` is a
    template is not at the name's location."""
    out = []
    for task in tasks:
        write = task.write
        if task.engine is None and write.location is None and write.profile.table_format == "delta":
            task = replace(task, name_location=locate(write.table))
        out.append(task)
    return tuple(out)


def pair_evidence(a: DeclaredTask, b: DeclaredTask) -> tuple[Evidence, ...]:
    """The cells (either commit order) in which one of the two fails or both corrupt the data,
    by every matrix that applies: each task's declared profile, then each engine's own."""
    profiles = (a.write.profile, b.write.profile, a.engine_profile, b.engine_profile)
    found: list[Evidence] = []
    for profile in dict.fromkeys(p for p in profiles if p is not None):
        ops = (a.write.operation, b.write.operation)
        if not all(op in profile.operations for op in ops):
            continue  # an engine matrix without the operation says nothing about the pair
        for earlier, later in (ops, ops[::-1]):
            cell = profile.cell(earlier, later)
            if cell.later_fails or cell.effect.keeps_apart:
                evidence = Evidence(profile, cell)
                if evidence not in found:
                    found.append(evidence)
    return tuple(found)


def _firings_close(a: Sequence[float], b: Sequence[float], window: float) -> float | None:
    """A start of ``a`` within ``window`` seconds of a start of ``b`` (sorted lists), if any."""
    for t in a:
        i = bisect.bisect_left(b, t - window)
        if i < len(b) and b[i] < t + window:
            return t
    return None


def _runs_reason(a: DeclaredTask, what: str, same_task: bool) -> str:
    """Why two runs of one DAG meet: say it is ``max_active_runs``, and what keeps them apart."""
    fix = "max_active_runs=1 or max_active_tis_per_dag=1" if same_task else "max_active_runs=1"
    return f"{what}, because max_active_runs={a.max_active_runs} lets runs overlap ({fix} would keep them apart)"


def why_together(a: DeclaredTask, b: DeclaredTask, window: float) -> str | None:
    """Why ``a`` and ``b`` can run at the same time, or None if they cannot.

    Within one DAG, Airflow's dependency graph decides (mapped tasks, task groups, setup and
    teardown tasks are read through it: ``upstream`` holds the task ids as the DAG names them);
    instances of one mapped task run side by side within a run unless the task allows one at a
    time; and two runs of the DAG meet only when ``max_active_runs`` > 1, which the reason says.
    """
    if a.dag_id == b.dag_id:
        if a.base_task_id == b.base_task_id:
            if (a.task_id != b.task_id or a.mapped_unknown) and a.instances_side_by_side:
                which = "instances of the mapped task" if a.mapped_unknown else "two instances of the mapped task"
                return f"{which} run side by side in one run (max_active_tis_per_dagrun is not 1)"
            if a.runs_overlap and not a.templated:
                return _runs_reason(a, "two runs of the DAG at once, each running the task", same_task=True)
            return None
        if a.base_task_id not in b.upstream and b.base_task_id not in a.upstream:
            return "same DAG, no dependency path between them"
        if a.max_active_runs > 1 and not (a.templated or b.templated):
            first, second = (a, b) if a.base_task_id in b.upstream else (b, a)
            return _runs_reason(a, f"two runs of the DAG at once ({first.base_task_id} is upstream of "
                                   f"{second.base_task_id} within a run, not across runs)", same_task=False)
        return None
    if a.firings is None or b.firings is None:
        loose = a if a.firings is None else b
        return f"DAG {loose.dag_id} is not time-scheduled ({loose.schedule or 'manual'}): it may run at any time"
    hit = _firings_close(a.firings, b.firings, window)
    if hit is None:
        return None
    return f"schedules start within {window / 60:g} min of each other ({a.schedule} / {b.schedule})"


def collisions(tasks: Sequence[DeclaredTask], window: float = 3600.0) -> list[Collision]:
    """Every pair (and every task with itself) that can run together and would conflict or
    corrupt the data; the pairs that corrupt data come first."""
    found: list[Collision] = []
    for i, a in enumerate(tasks):
        for b in tasks[i:]:
            overlap = footprint_overlap(a.write, b.write, same_table=bool(a.identities & b.identities))
            if overlap is None:
                continue
            evidence = pair_evidence(a, b)
            if not evidence:
                continue
            why = why_together(a, b, window)
            if why is not None:
                found.append(Collision(a, b, why, overlap, evidence))
    order = list(FindingKind)
    return sorted(found, key=lambda c: order.index(c.kind))  # stable: scan order within a kind


@dataclass(frozen=True)
class PlannedPool:
    """A plain Airflow pool standing in for admission on a group of colliding tasks.

    Tasks that collide with none of the pool's other shared tasks take one slot each and run
    side by side; the others take every slot, so they run alone (a readers-writer lock made
    of slots). A pair that would corrupt the data is a collision like any other, so its two
    tasks never hold slots at the same time.
    """

    name: str
    slots: int
    tables: tuple[str, ...]
    task_slots: tuple[tuple[str, int], ...]  # (dag_id.task_id, pool_slots)
    collisions: int
    warnings: tuple[str, ...] = field(default=())
    corrupting: tuple[tuple[str, str], ...] = field(default=())  # pairs that would corrupt data

    @property
    def description(self) -> str:
        corrupting = f", {len(self.corrupting)} of them would corrupt data" if self.corrupting else ""
        return (f"occflow: keeps {self.collisions} colliding write pair(s){corrupting} on {', '.join(self.tables)} "
                f"apart (plan from declared writes)")

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "slots": self.slots,
            "tables": list(self.tables),
            "description": self.description,
            "tasks": [{"task": t, "pool_slots": s} for t, s in self.task_slots],
            "corrupts_data": [list(pair) for pair in self.corrupting],
            "warnings": list(self.warnings),
        }


def _pool_name(tables: Iterable[str], taken: set[str]) -> str:
    base = "occflow_" + "__".join(re.sub(r"[^A-Za-z0-9_.-]", "_", t) for t in sorted(tables))
    base = base[:200]
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def plan_pools(tasks: Sequence[DeclaredTask], window: float = 3600.0) -> list[PlannedPool]:
    """Pools (name, slots, per-task pool_slots) that keep every colliding pair apart.

    A task sits in one pool only, so tasks linked by collisions (across tables too) share a
    pool. Within it, a greedy set of mutually compatible tasks (fewest collisions first) are
    "shared" and take 1 slot; every other task takes all the slots.
    """
    found = collisions(tasks, window)
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    edges: dict[str, set[str]] = {}
    by_ident = {t.ident: t for t in tasks}
    for c in found:
        a, b = c.first.ident, c.second.ident
        edges.setdefault(a, set()).add(b)
        edges.setdefault(b, set()).add(a)
        parent[root(a)] = root(b)
    groups: dict[str, list[str]] = {}
    for ident in edges:
        groups.setdefault(root(ident), []).append(ident)

    taken: set[str] = set()
    pools: list[PlannedPool] = []
    for members in sorted(groups.values(), key=lambda m: sorted(m)):
        members.sort(key=lambda t: (len(edges[t]), t))
        shared: list[str] = []
        for t in members:
            if t not in edges[t] and not any(s in edges[t] for s in shared):
                shared.append(t)
        slots = max(len(shared), 1)
        task_slots = tuple(sorted((t, 1 if t in shared else slots) for t in members))
        tables = tuple(sorted({by_ident[t].write.table for t in members}))
        pair_count = sum(1 for c in found if c.first.ident in members)
        corrupting = tuple((c.first.ident, c.second.ident) for c in found
                           if c.first.ident in members and c.kind is FindingKind.CORRUPTS_DATA)
        warnings = tuple(
            f"{t} already runs in pool {by_ident[t].pool!r}; a task has one pool, move it"
            for t in sorted(members)
            if by_ident[t].pool not in (None, "", "default_pool")
        )
        pools.append(PlannedPool(_pool_name(tables, taken), slots, tables, task_slots, pair_count, warnings,
                                 corrupting))
    return pools
