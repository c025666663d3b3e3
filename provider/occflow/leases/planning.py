"""Static analysis of declared writes: which tasks can collide (lint) and which plain Airflow
pools would keep them apart (pools plan). Pure Python over ``DeclaredTask`` records; reading
them out of a DAG folder is ``occflow.leases.dagscan``.

Two declared writes collide when (1) they can run at the same time, (2) their footprints may
overlap and (3) the matrix says one of them would fail. Partition values that are Jinja
templates are only known at run time, so they may overlap anything, except that one task's
templated footprint in two runs of its DAG is taken to differ per run (``{{ ds }}``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..core.declaration import WriteDeclaration
from ..core.profiles import Cell

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

    @property
    def ident(self) -> str:
        return f"{self.dag_id}.{self.task_id}"

    @property
    def templated(self) -> bool:
        return any(_TEMPLATE.search(str(v)) for p in self.write.partitions or () for v in p.values())


@dataclass(frozen=True)
class Collision:
    """A pair of tasks that can run together and would conflict, with the cells that say so."""

    first: DeclaredTask
    second: DeclaredTask
    why_together: str
    footprint: str
    cells: tuple[Cell, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "first": self.first.ident,
            "second": self.second.ident,
            "table": self.first.write.table,
            "operations": [self.first.write.operation.value, self.second.write.operation.value],
            "profile": self.first.write.profile.name,
            "why_together": self.why_together,
            "footprint": self.footprint,
            "cells": [c.to_dict() for c in self.cells],
        }


def _value_match(a: object, b: object) -> bool:
    return a == b or bool(_TEMPLATE.search(str(a))) or bool(_TEMPLATE.search(str(b)))


def footprint_overlap(a: WriteDeclaration, b: WriteDeclaration) -> str | None:
    """How two declared footprints may overlap, or None if they cannot."""
    if a.table != b.table:
        return None
    if not a.partitions or not b.partitions:
        return "whole table"
    for pa in a.partitions:
        for pb in b.partitions:
            if all(_value_match(pa[c], pb[c]) for c in pa.keys() & pb.keys()):
                shown = "/".join(f"{k}={pa[k]}" for k in sorted(pa))
                return f"partition {shown}" + ("" if dict(pa) == dict(pb) else f" ~ {'/'.join(f'{k}={pb[k]}' for k in sorted(pb))}")
    return None


def failing_cells(a: WriteDeclaration, b: WriteDeclaration) -> tuple[Cell, ...]:
    """The cells (either commit order, either task's profile) in which one of the two fails."""
    cells: list[Cell] = []
    for profile in dict.fromkeys([a.profile, b.profile]):
        if a.operation not in profile.operations or b.operation not in profile.operations:
            continue
        for earlier, later in ((a.operation, b.operation), (b.operation, a.operation)):
            cell = profile.cell(earlier, later)
            if cell.later_fails and cell not in cells:
                cells.append(cell)
    return tuple(cells)


def _firings_close(a: Sequence[float], b: Sequence[float], window: float) -> float | None:
    """A start of ``a`` within ``window`` seconds of a start of ``b`` (sorted lists), if any."""
    for t in a:
        i = bisect.bisect_left(b, t - window)
        if i < len(b) and b[i] < t + window:
            return t
    return None


def why_together(a: DeclaredTask, b: DeclaredTask, window: float) -> str | None:
    """Why ``a`` and ``b`` can run at the same time, or None if they cannot."""
    if a.dag_id == b.dag_id:
        if a.task_id == b.task_id:
            if a.max_active_runs > 1 and not a.templated:
                return f"two runs of the DAG at once (max_active_runs={a.max_active_runs})"
            return None
        if a.task_id not in b.upstream and b.task_id not in a.upstream:
            return "same DAG, no dependency path between them"
        if a.max_active_runs > 1 and not (a.templated or b.templated):
            return f"dependent, but runs overlap (max_active_runs={a.max_active_runs})"
        return None
    if a.firings is None or b.firings is None:
        loose = a if a.firings is None else b
        return f"DAG {loose.dag_id} is not time-scheduled ({loose.schedule or 'manual'}): it may run at any time"
    hit = _firings_close(a.firings, b.firings, window)
    if hit is None:
        return None
    return f"schedules start within {window / 60:g} min of each other ({a.schedule} / {b.schedule})"


def collisions(tasks: Sequence[DeclaredTask], window: float = 3600.0) -> list[Collision]:
    """Every pair (and every task with itself) that can run together and would conflict."""
    found: list[Collision] = []
    for i, a in enumerate(tasks):
        for b in tasks[i:]:
            overlap = footprint_overlap(a.write, b.write)
            if overlap is None:
                continue
            cells = failing_cells(a.write, b.write)
            if not cells:
                continue
            why = why_together(a, b, window)
            if why is not None:
                found.append(Collision(a, b, why, overlap, cells))
    return found


@dataclass(frozen=True)
class PlannedPool:
    """A plain Airflow pool standing in for admission on a group of colliding tasks.

    Tasks that collide with none of the pool's other shared tasks take one slot each and run
    side by side; the others take every slot, so they run alone (a readers-writer lock made
    of slots).
    """

    name: str
    slots: int
    tables: tuple[str, ...]
    task_slots: tuple[tuple[str, int], ...]  # (dag_id.task_id, pool_slots)
    collisions: int
    warnings: tuple[str, ...] = field(default=())

    @property
    def description(self) -> str:
        return (f"occflow: keeps {self.collisions} colliding write pair(s) on {', '.join(self.tables)} apart "
                f"(plan from declared writes)")

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "slots": self.slots,
            "tables": list(self.tables),
            "description": self.description,
            "tasks": [{"task": t, "pool_slots": s} for t, s in self.task_slots],
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
        warnings = tuple(
            f"{t} already runs in pool {by_ident[t].pool!r}; a task has one pool, move it"
            for t in sorted(members)
            if by_ident[t].pool not in (None, "", "default_pool")
        )
        pools.append(PlannedPool(_pool_name(tables, taken), slots, tables, task_slots, pair_count, warnings))
    return pools
