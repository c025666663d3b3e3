"""A stand-in for a MaxCompute project behind PyODPS's client interface, for tests and demos.

MaxCompute is a remote service that cannot run on this machine. ``StandInProject`` answers the
calls occflow makes on an ``odps.ODPS`` client - ``run_sql(sql, hints=..., unique_identifier_id=...)``,
``get_instance``, ``list_instances``, ``get_table``, ``exist_table`` - and its instances answer
``Instance``'s (``id``, ``status``, ``is_terminated``, ``is_successful``, ``wait_for_success``,
``get_logview_address``, ``tasks``, ``stop``). Every job commits through the reference engine
(``standin_state.py``) with its table's MaxCompute profile; a failed job raises the error PyODPS
raises, with MaxCompute's own text (``errors.py``).

What it does not model: the rows of the SQL (the reference engine's data model stands in: an
INSERT adds rows, an UPDATE changes every row it read, docs/reference-engine.md), and time (a
job runs ``job_seconds[operation]`` seconds of wall clock - ``"*"`` for any operation, default
0.2 - then ends when it is polled, or when ``finish(id)`` ends it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from ...core.declaration import partition_key
from ...core.errors import CommitConflict, InvalidDeclarationError
from ...core.footprint import PartitionKey
from ...core.operations import Operation
from ...core.reference import ReferenceTable, Transaction
from ...core.tablefacts import TableFacts
from .errors import FAULTS, odps_error, transaction_aborted
from .sql import read_maxcompute_write
from .standin_state import Job, ProjectState, ProjectStore, StandInTable

DEFAULT_JOB_SECONDS = 0.2
TASK_NAME = "AnonymousSQLTask"

#: The faults a stand-in job can be made to fail with: ``errors.FAULTS`` (conflicts) and two that
#: are not conflicts, from MaxCompute's SQL error codes page (alibabacloud.com/help/en/maxcompute/
#: user-guide/sql-errors): an internal error (``not_a_conflict``: ordinary retries), and a commit
#: whose rollback failed (``commit_state_unknown``: the rows may or may not be in the table).
STANDIN_FAULTS = {
    **FAULTS,
    "internal_error": "ODPS-0010000:System internal error - fuxi job failed, caused by: worker lost",
    "rollback_failed": (
        "ODPS-0110999: Critical! Internal error happened in commit operation and rollback failed, possible "
        "breach of atomicity - Rename directory failed during DDLTask."
    ),
}


class StandInProject:
    """A MaxCompute project on this machine (see the module docstring). ``path``: keep the
    project in a file, shared by every process that opens the same path."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        project: str = "occflow_standin",
        job_seconds: Mapping[str, float] | None = None,
    ) -> None:
        self.project = project
        self.path = None if path is None else str(path)
        self.store = ProjectStore(project, path)
        if job_seconds:
            with self.store.state() as state:
                state.job_seconds.update({str(k): float(v) for k, v in job_seconds.items()})

    # ------------------------------------------------------------------ tables

    def create_table(
        self,
        name: str,
        *,
        partition_columns: Sequence[str] = (),
        partitions: Sequence[Mapping[str, Any]] = (),
        transactional: bool = False,
        primary_key: Sequence[str] | None = None,
        rows_per_insert: int = 2,
    ) -> None:
        """A table; a partitioned one lists the partitions jobs may write (``[{"ds": "..."}]``)."""
        facts = TableFacts(name, "maxcompute", "maxcompute", tuple(partition_columns),
                           {"transactional": str(transactional).lower()},
                           primary_key=tuple(primary_key) if primary_key is not None else None)
        keys = [partition_key(p) for p in partitions] if partition_columns else [""]
        if partition_columns and not keys:
            raise InvalidDeclarationError(f"stand-in table {name}: list the partitions jobs may write")
        reference = ReferenceTable(facts.profile_name(), partitions=keys, rows_per_insert=rows_per_insert)
        with self.store.state() as state:
            state.tables[_key(name)] = StandInTable(
                name, facts.partition_columns, dict(facts.properties), facts.primary_key, reference
            )

    def exist_table(self, name: str, project: str | None = None, schema: str | None = None) -> bool:
        with self.store.state() as state:
            return _key(name) in state.tables

    def get_table(self, name: str, project: str | None = None, schema: str | None = None) -> Any:
        """What PyODPS's ``Table`` says about the table: ``table_schema.partitions``,
        ``is_transactional``, ``primary_key``, ``table_properties``."""
        table = self._table_copy(name)
        return SimpleNamespace(
            name=table.name,
            table_schema=SimpleNamespace(partitions=[SimpleNamespace(name=c) for c in table.partition_columns]),
            is_transactional=table.properties.get("transactional") == "true",
            primary_key=None if table.primary_key is None else list(table.primary_key),
            table_properties=dict(table.properties),
        )

    def _table_copy(self, name: str) -> StandInTable:
        with self.store.state() as state:
            if _key(name) not in state.tables:
                raise odps_error(f"ODPS-0130131:Table not found - table {self.project}.{name} cannot be resolved", "")
            return state.tables[_key(name)]

    def rows(self, name: str) -> dict[PartitionKey, dict[str, int]]:
        """The table's committed rows by partition (the reference engine's data model)."""
        snap = self._table_copy(name).reference.snapshot()
        return {p: dict(r) for p, r in snap.rows.items()}

    def history(self, name: str) -> list[Any]:
        """The table's commits in order (``core.reference.Commit``: ID version, time version, ...)."""
        return list(self._table_copy(name).reference.history)

    def reference(self, name: str) -> ReferenceTable:
        """A copy of the table's reference engine (read it; the project keeps its own)."""
        return self._table_copy(name).reference

    # ------------------------------------------------------------------ faults

    def fail_next(self, table: str, operation: str, fault: str = "metadata_lock", *, residue: bool = False) -> None:
        """The next job of ``operation`` on ``table`` fails with ``fault``'s ODPS text
        (``STANDIN_FAULTS``); ``residue=True``: its rows land all the same (spec 000: a failed
        INTO on a standard table may leave its data behind, whatever failed it)."""
        if fault not in STANDIN_FAULTS:
            raise InvalidDeclarationError(f"unknown stand-in fault {fault!r}; known: {', '.join(STANDIN_FAULTS)}")
        with self.store.state() as state:
            state.faults.append({"table": _key(table), "operation": operation, "fault": fault, "residue": residue})

    # ------------------------------------------------------------------ jobs (the ODPS client)

    def run_sql(
        self, sql: str, project: str | None = None, hints: Mapping[str, Any] | None = None,
        unique_identifier_id: str | None = None, **_: Any,
    ) -> StandInInstance:
        """Submit ``sql``; the same ``unique_identifier_id`` again gives the same instance."""
        with self.store.state() as state:
            if unique_identifier_id is not None:
                same = next((j for j in state.jobs.values() if j.unique_id == unique_identifier_id), None)
                if same is not None:
                    return StandInInstance(self, same.id)
            job = self._stage(state, sql, dict(hints or {}), unique_identifier_id)
            state.jobs[job.id] = job
            return StandInInstance(self, job.id)

    def run_clustering(self, table: str, partition: Mapping[str, Any] | None = None) -> StandInInstance:
        """A clustering job, as MaxCompute's clustering service runs one (no SQL a task submits):
        it reorganises the partition's files, with an ID version and no time version (spec 001)."""
        with self.store.state() as state:
            key = None if partition is None else (partition_key(partition),)
            job = self._stage(state, f"-- clustering of {table}", {}, None, (table, Operation.CLUSTERING, key))
            state.jobs[job.id] = job
            return StandInInstance(self, job.id)

    def _stage(
        self, state: ProjectState, sql: str, settings: dict[str, Any], unique_id: str | None,
        write: tuple[str, Operation, tuple[str, ...] | None] | None = None,
    ) -> Job:
        name = read_maxcompute_write(sql, None).table if write is None else write[0]
        table = state.tables.get(_key(name))
        now = time.time()
        job_id = f"{time.strftime('%Y%m%d%H%M%S', time.gmtime(now))}{state.next_id:06d}gstandin"
        state.next_id += 1
        if table is None:
            raise odps_error(f"ODPS-0130131:Table not found - table {self.project}.{name} cannot be resolved", job_id)
        if write is None:
            derived = read_maxcompute_write(sql, table.partition_columns)
            operation = derived.operation
            keys = None if derived.partitions is None else tuple(partition_key(p) for p in derived.partitions)
        else:
            operation, keys = write[1], write[2]
        seconds = state.job_seconds.get(operation.value, state.job_seconds.get("*", DEFAULT_JOB_SECONDS))
        job = Job(job_id, sql, {str(k): str(v) for k, v in settings.items()}, unique_id, _key(name),
                  operation.value, keys, now, now + seconds)
        # MVCC: the job plans on the snapshot it started on; the commit validates at its end.
        txn = table.reference.begin(operation.value, keys, txn_id=job_id)
        job.txn_id, job.read_version = txn.txn_id, txn.snapshot.version
        job.footprint, job.change = txn.footprint, txn.change
        fault = next((f for f in state.faults if f["table"] == job.table and f["operation"] == job.operation), None)
        if fault is not None:
            state.faults.remove(fault)
            job.fault, job.residue = fault["fault"], bool(fault["residue"])
        return job

    def get_instance(self, id_: str, project: str | None = None, **_: Any) -> StandInInstance:
        with self.store.state() as state:
            if id_ not in state.jobs:
                raise odps_error(f"NoSuchObject: instance {id_} does not exist in {self.project}", id_)
        return StandInInstance(self, id_)

    def list_instances(self, status: str | None = None, **_: Any) -> Iterator[StandInInstance]:
        """Instances, oldest first; ``status``: ``Running`` or ``Terminated``."""
        self.settle_due()
        with self.store.state() as state:
            ids = [j.id for j in state.jobs.values() if status is None or j.status == status]
        return iter([StandInInstance(self, i) for i in ids])

    def stop_instance(self, id_: str, project: str | None = None) -> None:
        StandInInstance(self, id_).stop()

    # ------------------------------------------------------------------ the end of a job

    def job(self, job_id: str) -> Job:
        """The instance's record, settled first if its time is up."""
        with self.store.state() as state:
            _settle_due(state, self.project)
            return state.jobs[job_id]

    def settle_due(self) -> None:
        """End every job whose time is up, in the order they finish (the first to finish wins)."""
        with self.store.state() as state:
            _settle_due(state, self.project)

    def finish(self, job_id: str) -> None:
        """End the job now (it commits or fails), for tests that order the ends themselves."""
        with self.store.state() as state:
            job = state.jobs[job_id]
            if job.status == "Running":
                job.finish_at = min(job.finish_at, time.time())
            _settle_due(state, self.project)

    def stop(self, job_id: str) -> None:
        with self.store.state() as state:
            job = state.jobs[job_id]
            if job.status == "Running":
                job.status, job.success, job.end_time = "Terminated", False, time.time()
                job.error = f"ODPS-0130000: Instance {job_id} was cancelled by the user"


def _settle_due(state: ProjectState, project: str) -> None:
    now = time.time()
    due = sorted((j for j in state.jobs.values() if j.status == "Running" and now >= j.finish_at),
                 key=lambda j: j.finish_at)
    for job in due:
        _settle(state, job, project)


def _settle(state: ProjectState, job: Job, project: str) -> None:
    """Commit ``job`` through the reference engine now (validated against what committed since it
    started), or fail it with MaxCompute's text for what stopped it."""
    table = state.tables[job.table]
    reference = table.reference
    assert job.footprint is not None and job.change is not None
    txn = Transaction(reference, job.txn_id, reference.snapshot(job.read_version), job.footprint, job.change)
    job.status, job.end_time = "Terminated", time.time()
    if job.fault is not None and not job.residue:
        job.success, job.error = False, STANDIN_FAULTS[job.fault].format(values=_first_value(job))
        return
    try:
        commit = txn.commit()
    except CommitConflict as lost:
        winner = lost.winner
        last = next((c for c in reference.history if winner is not None and c.version == winner.version), None)
        job.success = False
        job.error = transaction_aborted(
            project, table.name.split(".")[-1], (job.partitions or ("",))[0], job.txn_id,
            int((last.committed_at if last else time.time()) * 1e6), int(job.submitted_at * 1e6), job.operation,
        )
        return
    job.commit = {"id_version": commit.version, "time_version": commit.time_version,
                  "rebased": commit.rebased, "data_change": commit.footprint.data_change}
    if job.residue:  # the rows landed, yet the job reports the fault (spec 000, standard tables)
        job.success, job.error = False, STANDIN_FAULTS[job.fault or "metadata_lock"].format(values=_first_value(job))
        return
    job.success = True


def _first_value(job: Job) -> str:
    return (job.partitions or ("",))[0].split("=", 1)[-1]


def _key(name: str) -> str:
    return name.strip().lower()


@dataclass
class StandInInstance:
    """One SQL instance of a ``StandInProject``, with the part of PyODPS's ``Instance`` occflow uses."""

    project: StandInProject
    id: str

    @property
    def status(self) -> Any:
        from odps.models import Instance  # pyodps: the [maxcompute] extra, the stand-in's own status enum

        return Instance.Status.RUNNING if self.project.job(self.id).status == "Running" else Instance.Status.TERMINATED

    def is_terminated(self, *_: Any, **__: Any) -> bool:
        return self.project.job(self.id).status == "Terminated"

    def is_running(self, *_: Any, **__: Any) -> bool:
        return not self.is_terminated()

    def is_successful(self, *_: Any, **__: Any) -> bool:
        return bool(self.project.job(self.id).success)

    def wait_for_completion(self, interval: float = 0.05, timeout: float | None = None, **_: Any) -> None:
        started = time.monotonic()
        while not self.is_terminated():
            if timeout is not None and time.monotonic() - started > timeout:
                raise odps_error(f"Wait completion of instance {self.id} timed out", self.id)
            time.sleep(interval)

    def wait_for_success(self, interval: float = 0.05, timeout: float | None = None, **_: Any) -> None:
        self.wait_for_completion(interval, timeout)
        job = self.project.job(self.id)
        if not job.success:
            raise odps_error(job.error or "ODPS-0010000:System internal error", self.id)

    def get_task_result(self, task_name: str | None = None, **_: Any) -> str:
        job = self.project.job(self.id)
        return job.error or ""

    def get_logview_address(self, hours: int | None = None) -> str:
        return f"standin://{self.project.project}/instances/{self.id}"

    @property
    def tasks(self) -> list[Any]:
        """The SQL task with its query and its settings, as PyODPS's ``SQLTask`` holds them."""
        job = self.project.job(self.id)
        return [SimpleNamespace(name=TASK_NAME, query=job.sql, properties={"settings": json.dumps(job.settings)})]

    def commit_info(self) -> dict[str, Any]:
        """What the stand-in's MetaService committed: ID version, time version (none for a
        compaction or clustering), whether it was rebased (meta-level retry)."""
        return dict(self.project.job(self.id).commit)

    @property
    def end_time(self) -> float | None:
        return self.project.job(self.id).end_time

    def stop(self) -> None:
        self.project.stop(self.id)


_MEMORY: dict[str, StandInProject] = {}


def open_standin(spec: str) -> StandInProject:
    """The stand-in project ``spec`` names: ``memory:NAME`` (one per name in this process) or
    the path of a project file (shared by every process that opens it)."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidDeclarationError(f"a stand-in is 'memory:NAME' or the path of a project file, got {spec!r}")
    if spec.startswith("memory:"):
        return _MEMORY.setdefault(spec, StandInProject(project=spec.split(":", 1)[1] or "occflow_standin"))
    return StandInProject(spec)
