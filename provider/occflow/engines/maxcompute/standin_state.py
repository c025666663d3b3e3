"""The stand-in project's state: tables on occflow's reference engine, and the jobs run on them.

MaxCompute is a remote service that cannot run here. The stand-in (``standin.py``) keeps what a
project holds - tables with their properties, and SQL instances with their settings and
results - and commits every job through ``occflow.core.reference.ReferenceTable`` governed by
the table's MaxCompute profile, so jobs race by the specs' rules: a job starts on a snapshot
when it is submitted (MVCC), validates at its end against every commit since (OCC: the matrix
cell of the two operations on overlapping partitions), is rebased without rework when nothing
conflicts (meta-level retry), and the job that finishes first wins.

The state lives in memory, or in a file (``path``) so that tasks in separate worker processes
(a LocalExecutor) share one project; every change holds an exclusive ``flock`` on the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pickle
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.footprint import Footprint
from ...core.profiles import get_profile
from ...core.reference import Change, ReferenceTable


@dataclass
class StandInTable:
    name: str
    partition_columns: tuple[str, ...]
    properties: dict[str, str]
    primary_key: tuple[str, ...] | None
    reference: ReferenceTable

    @property
    def profile_name(self) -> str:
        return self.reference.profile.name


@dataclass
class Job:
    """One SQL instance: what was submitted, the transaction it staged, and how it ended."""

    id: str
    sql: str
    settings: dict[str, str]
    unique_id: str | None
    table: str
    operation: str
    partitions: tuple[str, ...] | None
    submitted_at: float
    finish_at: float
    txn_id: str = ""
    read_version: int = 0
    footprint: Footprint | None = None
    change: Change | None = None
    status: str = "Running"  # Running | Terminated
    success: bool | None = None
    error: str | None = None
    end_time: float | None = None
    fault: str | None = None
    residue: bool = False
    commit: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProjectState:
    project: str
    tables: dict[str, StandInTable] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    job_seconds: dict[str, float] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    next_id: int = 1


def _reference_state(table: ReferenceTable) -> dict[str, Any]:
    """``table`` as plain data: its lock and counters are not picklable, its profile is a name."""
    state = dict(table.__dict__)
    state.pop("_lock")
    state["profile"] = table.profile.name
    for key in ("_ids", "_files"):
        n = next(state[key])
        setattr(table, key, itertools.count(n))
        state[key] = n
    return state


def _reference_from(state: dict[str, Any]) -> ReferenceTable:
    table = ReferenceTable.__new__(ReferenceTable)
    table.__dict__.update(state)
    table.profile = get_profile(state["profile"])
    table._lock = threading.Lock()
    table._ids = itertools.count(state["_ids"])
    table._files = itertools.count(state["_files"])
    return table


def _dump(state: ProjectState) -> bytes:
    tables = {n: (t.name, t.partition_columns, t.properties, t.primary_key, _reference_state(t.reference))
              for n, t in state.tables.items()}
    plain = {**state.__dict__, "tables": tables}
    return pickle.dumps(plain)


def _load(data: bytes) -> ProjectState:
    plain = pickle.loads(data)  # noqa: S301 - the stand-in's own file, written by _dump
    tables = {n: StandInTable(name, cols, props, pk, _reference_from(ref))
              for n, (name, cols, props, pk, ref) in plain.pop("tables").items()}
    return ProjectState(tables=tables, **plain)


class ProjectStore:
    """Where the state lives: ``with store.state() as s:`` reads it, and writes it back after."""

    def __init__(self, project: str, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._lock = threading.RLock()
        self._memory = ProjectState(project)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.state():  # creates the file for the first process; the others read it
                pass

    @contextlib.contextmanager
    def state(self) -> Iterator[ProjectState]:
        with self._lock:
            if self.path is None:
                yield self._memory
                return
            with open(self.path.with_suffix(self.path.suffix + ".lock"), "a+b") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    data = self.path.read_bytes() if self.path.exists() and self.path.stat().st_size else b""
                    current = _load(data) if data else ProjectState(self._memory.project)
                    yield current
                    tmp = self.path.with_suffix(self.path.suffix + f".{os.getpid()}.tmp")
                    tmp.write_bytes(_dump(current))
                    os.replace(tmp, self.path)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
