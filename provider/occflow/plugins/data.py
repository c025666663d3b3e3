"""What the "Table writes" view shows, read from the lease store and Airflow's metadata DB.

Three sources, all read-only:

- the lease store's live leases and waiting queue (``LeaseStore.leases`` / ``waiting``): who holds
  or waits for which footprint of which table, now;
- the store's recorded history (``occflow_lease_events``, on when ``OCCFLOW_LEASE_HISTORY=1``):
  when each lease was asked for, granted and let go, so how long a write waited and held it;
- the write reports every occflow write pushes, committed, failed or skipped, also a try that
  ended before its first attempt (XCom ``occflow_report``, read back as
  ``core.report.WriteReport``; older runs: ``return_value``), one row per try: an earlier try's
  report is the copy kept in Airflow's task state store (``tries``), its state Airflow's
  ``TaskInstanceHistory``:
  attempts, conflicts with their kind and winning commit, wasted seconds, the commit, and the
  seconds from the lease's grant to the first attempt's start (granted but not started). A value
  that claims to be a report and is not one is shown as malformed, never a 500. The value of a
  setting that holds a secret, quoted in an error or a reason, is shown as ``***``.

A report carries its lease's fencing token, and a grant event carries the same token for the
same table and names the task instance it was granted to: a write is tied to a lease only when
all three agree (table, fence, and the grant's task instance and try are the report's), so a
report pushed by another task cannot claim a lease by its table and fence alone. A row shows at
most ``rows.ATTEMPTS_FIRST`` + ``rows.ATTEMPTS_LAST`` lost attempts and says how many it leaves
out. The store files a delta-rs table under its location (``core.identifiers.canonical_location``),
other tables under their canonical name; a table filter by name also finds the location a ``DeltaWriteOperator`` without ``path`` writes
(``default_delta_location``, from the same ``OCCFLOW_HOME`` the workers read) and the locations
the reports of that name carry (``table_key``). Rows of DAGs the user may not read are left
out by the caller's ``readable`` predicate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from airflow.models.task_state_store import TaskStateStoreModel
from airflow.models.taskinstance import TaskInstance as TI
from airflow.models.taskinstancehistory import TaskInstanceHistory as TIH
from airflow.models.xcom import XComModel
from sqlalchemy import and_, or_, select

from ..core.errors import OccflowError
from ..core.report import WriteReport
from ..leases import LeaseStore, LeaseStoreError
from .rows import commit_only, read_report, write_row
from .tables import same_table, table_key, table_name
from .tries import KEY_PREFIX, stored_value, try_of

#: The XCom keys a write report is under: every end's report, then a committed try's return value.
REPORT_XCOM_KEYS = ("occflow_report", "return_value")
#: occflow's write operators by class name (``TaskInstance.operator``): their task instances are
#: shown even when they pushed no report (waiting for admission, killed).
WRITE_OPERATORS = ("DeltaWriteOperator", "SparkWriteOperator", "SparkSubmitWriteOperator", "MaxComputeWriteOperator")
MAX_LIMIT = 1000

Readable = Callable[[str], bool]
#: A task instance: DAG, run, task, map index.
TaskKey = tuple[str, str, str, int]


@dataclass(frozen=True)
class Filters:
    """What the user asked to see; ``None`` = everything readable."""

    dag_id: str | None = None
    table: str | None = None
    limit: int = 200
    run_id: str | None = None
    #: Locations the filter's table is known by besides its own (from the reports of that name).
    locations: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or not 1 <= self.limit <= MAX_LIMIT:
            raise ValueError(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {self.limit!r}")

    @property
    def table_key(self) -> str | None:
        """The filter's table as one identity (a malformed name or location raises here)."""
        return None if not self.table else table_key(self.table)

    def wants_dag(self, dag_id: str) -> bool:
        return not self.dag_id or dag_id == self.dag_id

    def wants_table(self, table: str) -> bool:
        if self.table is None:
            return True
        try:
            key = table_key(table)
        except (OccflowError, ValueError):  # a report's text that is no table's name: only itself
            return table == self.table
        return key in self.locations or same_table(table, self.table)


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).isoformat()


def _keys(text: str | None) -> list[str] | None:
    return None if text is None else sorted(json.loads(text))


def _task_of(holder_task_id: str) -> tuple[str, int]:
    """``task[3]`` (how a holder names a mapped task instance) -> ``("task", 3)``."""
    if holder_task_id.endswith("]") and "[" in holder_task_id:
        task, _, index = holder_task_id[:-1].rpartition("[")
        if index.isdigit():
            return task, int(index)
    return holder_task_id, -1


# ----------------------------------------------------------------- the lease store, now


def _holder(holder: Any) -> dict[str, Any]:
    task_id, map_index = _task_of(holder.task_id)
    return {
        "dag_id": holder.dag_id or None,
        "task_id": task_id or None,
        "map_index": map_index,
        "run_id": holder.run_id or None,
        "try_number": holder.try_number,
        "host": holder.host,
        "pid": holder.pid,
    }


def _visible(holder: Mapping[str, Any], readable: Readable, filters: Filters) -> bool:
    dag_id = holder["dag_id"]
    if filters.run_id and holder["run_id"] != filters.run_id:
        return False
    if dag_id is None:  # a lease taken outside Airflow (a script): no DAG to filter on
        return not filters.dag_id
    return filters.wants_dag(dag_id) and readable(dag_id)


def live_tables(
    store: LeaseStore, readable: Readable, filters: Filters, names: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Per table: the live leases and the waiting queue in serving order. ``names``: what the
    reports call the tables the store files by location."""
    tables: dict[str, dict[str, Any]] = {}

    def entry(table: str) -> dict[str, Any]:
        return tables.setdefault(table, {"table": table_name(table, names), "key": table, "leases": [], "waiting": []})

    for lease in store.leases():
        holder = _holder(lease.holder)
        if not filters.wants_table(lease.table) or not _visible(holder, readable, filters):
            continue
        entry(lease.table)["leases"].append(
            {
                "lease_id": lease.lease_id,
                "operation": lease.operation.value,
                "profile": lease.profile,
                "partitions": None if lease.partitions is None else sorted(lease.partitions),
                "fence": lease.fence,
                "acquired": lease.acquired.isoformat(),
                "expires": lease.expires.isoformat(),
                "holder": holder,
            }
        )
    places: dict[str, int] = {}
    for waiting in store.waiting():
        places[waiting["table"]] = place = places.get(waiting["table"], 0) + 1
        holder = _holder(waiting["holder"])
        if not filters.wants_table(waiting["table"]) or not _visible(holder, readable, filters):
            continue
        entry(waiting["table"])["waiting"].append(
            {
                "place": place,
                "request_id": waiting["request_id"],
                "operation": waiting["operation"],
                "profile": waiting["profile"],
                "partitions": None if waiting["partitions"] is None else sorted(waiting["partitions"]),
                "enqueued": waiting["enqueued"].isoformat(),
                "holder": holder,
            }
        )
    return [tables[t] for t in sorted(tables)]


# ----------------------------------------------------------------- the lease store's history


def lease_spans(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One span per lease from the recorded events: its holder (from the grant), when its
    request queued, when it was granted and how it ended (``release`` / ``expire`` /
    ``takeover``, ``None`` while live)."""
    enqueued: dict[str, float] = {}
    spans: dict[str, dict[str, Any]] = {}
    for e in sorted(events, key=lambda ev: ev["seq"]):
        kind, request_id, lease_id = e["kind"], e["request_id"], e["lease_id"]
        if kind == "enqueue" and request_id:
            enqueued.setdefault(request_id, e["at"])
        elif kind == "grant" and lease_id:
            asked = enqueued.get(request_id, e["at"])
            task_id, map_index = _task_of(e.get("task_id") or "")
            spans[lease_id] = {
                "lease_id": lease_id,
                "request_id": request_id,
                # The grant's holder: ``None`` when the store did not record it (a script's
                # lease, or an event from before holders were kept).
                "dag_id": e.get("dag_id") or None,
                "task_id": task_id or None,
                "map_index": map_index,
                "run_id": e.get("run_id") or None,
                "try_number": e.get("try_number"),
                "table": e["table_name"],
                "operation": e["operation"],
                "profile": e["profile"],
                "partitions": _keys(e["partitions"]),
                "fence": e["fence"],
                "asked_at": asked,
                "granted_at": e["at"],
                "waited_seconds": round(e["at"] - asked, 3),
                "ended_at": None,
                "ended_by": None,
                "held_seconds": None,
            }
        elif kind in ("release", "expire", "takeover") and lease_id in spans and spans[lease_id]["ended_by"] is None:
            span = spans[lease_id]
            span.update(ended_at=e["at"], ended_by=kind, held_seconds=round(e["at"] - span["granted_at"], 3))
    return list(spans.values())


def _span_view(span: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **span,
        "asked_at": _iso(span["asked_at"]),
        "granted_at": _iso(span["granted_at"]),
        "ended_at": _iso(span["ended_at"]),
    }


# ----------------------------------------------------------------- Airflow: reports and tries


def airflow_writes(session: Any, readable: Readable, filters: Filters, task: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The write task instances, newest first: every task instance that returned a write report,
    and those of occflow's write operators that did not (yet): skipped, failed, deferred."""
    query = (
        select(TI, XComModel.value)
        .outerjoin(
            XComModel,
            and_(
                XComModel.dag_id == TI.dag_id,
                XComModel.run_id == TI.run_id,
                XComModel.task_id == TI.task_id,
                XComModel.map_index == TI.map_index,
                XComModel.key.in_(REPORT_XCOM_KEYS),
            ),
        )
        .where(or_(XComModel.key.is_not(None), TI.operator.in_(WRITE_OPERATORS)))
        .order_by(TI.start_date.desc().nulls_last(), TI.task_id, TI.map_index)
        .limit(MAX_LIMIT * 4)
    )
    if filters.dag_id:
        query = query.where(TI.dag_id == filters.dag_id)
    if filters.run_id:
        query = query.where(TI.run_id == filters.run_id)
    if task is not None:
        query = query.where(TI.dag_id == task["dag_id"], TI.run_id == task["run_id"], TI.task_id == task["task_id"],
                            TI.map_index == task["map_index"])
    found: dict[TaskKey, tuple[Any, WriteReport | str | None]] = {}
    for ti, stored in session.execute(query):
        if not readable(ti.dag_id):
            continue
        try:
            value = None if stored is None else XComModel.deserialize_value(_Stored(stored))
        except Exception as exc:  # noqa: BLE001 - one bad row must not break the view for everyone
            value = {"format": "occflow.write_report/1", "unreadable": str(exc)[:200]}
        report = read_report(value)
        key = (ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
        if key in found and (report is None or isinstance(found[key][1], WriteReport)):
            continue  # the first report of a task instance wins (``occflow_report`` before ``return_value``)
        found[key] = (ti, report)
    tries = _with_earlier_tries(session, found)
    rows = []
    for ti, report in tries:
        if report is None and ti.operator not in WRITE_OPERATORS:
            continue  # some other task's return value
        if isinstance(report, WriteReport) and not filters.wants_table(report.table):
            continue
        if not isinstance(report, WriteReport) and filters.table_key is not None:
            continue  # no report: the table is not known here
        row = write_row(ti, report)
        for attempt in row["conflicts"]:
            if attempt["winner_dag"] and not readable(attempt["winner_dag"]):
                commit_only(attempt)
        rows.append(row)
    return rows


def _with_earlier_tries(
    session: Any, found: Mapping[TaskKey, tuple[Any, WriteReport | str | None]]
) -> list[tuple[Any, WriteReport | str | None]]:
    """Every try of the found task instances, each with its own report: the current try's from
    XCom (else the kept copy), the earlier tries' (Airflow's ``TaskInstanceHistory``) from the
    copies ``tries.ReportKeeper`` kept in the task state store (Airflow cleared their XComs)."""
    if not found:
        return []
    dag_ids = {k[0] for k in found}
    run_ids = {k[1] for k in found}
    kept: dict[tuple[TaskKey, int], WriteReport | str | None] = {}
    stored = session.execute(
        select(TaskStateStoreModel.dag_id, TaskStateStoreModel.run_id, TaskStateStoreModel.task_id,
               TaskStateStoreModel.map_index, TaskStateStoreModel.key, TaskStateStoreModel.value)
        .where(TaskStateStoreModel.key.startswith(KEY_PREFIX, autoescape=True),
               TaskStateStoreModel.dag_id.in_(dag_ids), TaskStateStoreModel.run_id.in_(run_ids))
        .limit(MAX_LIMIT * 8)
    )
    for dag_id, run_id, task_id, map_index, key, value in stored:
        number = try_of(key)
        if number is not None and (dag_id, run_id, task_id, map_index) in found:
            kept[((dag_id, run_id, task_id, map_index), number)] = read_report(stored_value(value))
    out: list[tuple[Any, WriteReport | str | None]] = []
    for key, (ti, report) in found.items():
        out.append((ti, report if report is not None else kept.get((key, ti.try_number))))
    earlier = session.scalars(
        select(TIH)
        .where(TIH.dag_id.in_(dag_ids), TIH.run_id.in_(run_ids))
        .order_by(TIH.start_date.desc().nulls_last())
        .limit(MAX_LIMIT * 4)
    )
    for tih in earlier:
        key = (tih.dag_id, tih.run_id, tih.task_id, tih.map_index)
        current = found.get(key)
        if current is None or tih.try_number >= current[0].try_number:
            continue  # another task's try, or the current try itself
        out.append((tih, kept.get((key, tih.try_number))))
    return out


@dataclass(frozen=True)
class _Stored:
    """What ``XComModel.deserialize_value`` reads: an object with the stored ``value``."""

    value: Any


# ----------------------------------------------------------------- together


def granted_to(span: Mapping[str, Any], write: Mapping[str, Any]) -> bool:
    """Whether the span's grant names the write's task instance (DAG, task, run, map index) and,
    where both know it, its try. A grant that names no task instance (a script's lease, an event
    from before the store kept holders) is no write's: nothing ties it to one."""
    if span.get("dag_id") is None:
        return False
    mine = (write["dag_id"], write["task_id"], write["run_id"], write["map_index"])
    if (span["dag_id"], span["task_id"], span["run_id"], span["map_index"]) != mine:
        return False
    tries = span.get("try_number"), write.get("try_number")
    return not all(tries) or tries[0] == tries[1]


def _link(writes: Sequence[dict[str, Any]], spans: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attach each write's lease (same table, same fencing token, granted to the write's own task
    instance: a report can say any table and fence, the store's grant says whose lease it is);
    the spans left over."""
    by_fence: dict[int, list[dict[str, Any]]] = {}
    for span in spans:
        if span["fence"]:
            by_fence.setdefault(int(span["fence"]), []).append(span)
    used: set[str] = set()
    for write in writes:
        if not write.get("fence"):
            continue
        for span in by_fence.get(int(write["fence"]), []):
            if (span["lease_id"] not in used and granted_to(span, write)
                    and same_table(span["table"], write["table_key"] or write["table"])):
                write["lease"] = _span_view(span)
                used.add(span["lease_id"])
                break
    return [s for s in spans if s["lease_id"] not in used]


def span_visible(
    span: Mapping[str, Any], readable: Readable, filters: Filters, reads_every_dag: bool = False
) -> bool:
    """Whether a reader sees a lease span: its holder's DAG must be one the reader may read (and
    the one the filters ask for). A span no DAG can be named for (a script's lease, an event
    recorded before the store kept holders) is shown only to a reader of every DAG, and only
    when no DAG or run is asked for: it may be any DAG's lease."""
    if not filters.wants_table(span["table"]):
        return False
    dag_id = span.get("dag_id")
    if dag_id is None:
        return reads_every_dag and not filters.dag_id and not filters.run_id
    if filters.run_id and span.get("run_id") != filters.run_id:
        return False
    return filters.wants_dag(dag_id) and readable(dag_id)


def timeline(
    store: LeaseStore | None, session: Any, readable: Readable, filters: Filters,
    task: Mapping[str, Any] | None = None, reads_every_dag: bool = False,
) -> dict[str, Any]:
    """Recent writes (with their lost attempts and their lease) and leases no write report
    claims (a write that was skipped or failed, a script's lease), newest first. Only what the
    reader may read: ``readable`` DAGs, and spans no DAG can be named for only when
    ``reads_every_dag`` (the auth manager says the reader may read every DAG)."""
    writes = airflow_writes(session, readable, filters, task)
    # The locations the filter's table was written at, as its reports say: its leases are there.
    filters = replace(filters, locations=filters.locations | {w["table_key"] for w in writes if w["table_key"]})
    history_error = None
    recorded: list[dict[str, Any]] = []
    if store is not None:
        try:
            recorded = lease_spans(store.history_events())
        except LeaseStoreError as exc:
            history_error = str(exc)
    spans = [s for s in recorded if span_visible(s, readable, filters, reads_every_dag)]
    unclaimed = _link(writes, spans)
    names = table_names(writes)
    for span in unclaimed:
        span["key"], span["table"] = span["table"], table_name(span["table"], names)
    entries = list(writes)
    if task is None:
        entries += [{"kind": "lease", "at": s["ended_at"] or s["granted_at"], **_span_view(s)} for s in unclaimed]
    entries.sort(key=lambda e: e["at"] or 0.0, reverse=True)
    entries = entries[: filters.limit]
    for e in entries:
        e["at"] = _iso(e["at"])
    return {
        "entries": entries,
        "history": bool(recorded),  # whether the store records history at all, not what this reader sees
        "history_error": history_error,
        "totals": _totals(e for e in entries if e["kind"] == "write"),
    }


def table_names(writes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """What the reports call each table the store files by location."""
    return {w["table_key"]: w["table"] for w in writes if w.get("table_key") and w.get("table")}


def _totals(writes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    writes = list(writes)
    timed = [float(w["grant_to_start_seconds"]) for w in writes if w.get("grant_to_start_seconds") is not None]
    return {
        "writes": len(writes),
        "committed": sum(1 for w in writes if w.get("committed")),
        "failed": sum(1 for w in writes if w.get("status") == "failed"),
        "skipped": sum(1 for w in writes if w.get("status") == "skipped"),
        # Tries that ended before their first attempt (invalid declaration, admission, start-up).
        "refused": sum(1 for w in writes if w.get("refused")),
        "malformed": sum(1 for w in writes if w.get("malformed")),
        "attempts": sum(int(w["attempts"] or 0) for w in writes),
        "conflicts": sum(int(w.get("conflict_count") or 0) for w in writes),
        "failures": sum(int(w.get("failure_count") or 0) for w in writes),
        "wasted_seconds": round(sum(float(w["wasted_seconds"] or 0.0) for w in writes), 3),
        "grant_to_start_seconds": None if not timed else round(sum(timed), 3),
    }
