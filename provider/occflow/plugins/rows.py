"""One try of a write task instance as a row of the "Table writes" view: its report read back
(``core.report.WriteReport``; a value that claims to be a report and is not one is named as
malformed), why it did not commit (``reason``: the engine's error, or why it ended before its
first attempt), its failed attempts (the first ``ATTEMPTS_FIRST`` and last ``ATTEMPTS_LAST``, and how
many lie between), and engine texts with the values of secret settings hidden (``core.secrets``).

An attempt is ``lost`` only when it lost a write conflict; one that failed for any other reason
(``not_a_conflict``: a bug, a missing file) is ``failed``, and one aborted before its commit
because its lease was not live is ``aborted``. A try without a report (killed, or from before
every end published one) takes its status from Airflow's state, so it counts in the totals."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.report import MalformedReport, WriteReport
from ..core.secrets import redact_settings

#: A row shows its first and last lost attempts and the count of the rest: a report with 50,000
#: lost attempts (written by a runaway loop or a hostile task) must not make a 20 MB page.
ATTEMPTS_FIRST = 20
ATTEMPTS_LAST = 5


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return float(value.timestamp())


def read_report(value: Any) -> WriteReport | str | None:
    """The report in an XCom value; the reason it is malformed (text) when it claims to be a
    report and is not one; ``None`` for any other value."""
    if not WriteReport.looks_like(value):
        return None
    try:
        return WriteReport.from_dict(value)
    except MalformedReport as exc:
        return str(exc)


def _shown(text: str | None) -> str | None:
    """An engine's text as the view shows it: a setting that holds a secret (a driver's log tail
    quoting ``spark.hadoop.fs.s3a.secret.key=...``) has its value hidden (``core.secrets``)."""
    return None if text is None else redact_settings(text)


def _attempts(report: WriteReport) -> list[dict[str, Any]]:
    """The lost attempts: each with its kind, winner (and the winner's task), seconds, and what
    the policy did; then the attempts aborted because the lease lapsed."""
    rows = [
        {
            "attempt": lost.attempt,
            "kind": lost.kind.value,
            "winner": lost.winner_text(),
            "winner_task": None if lost.winner is None else lost.winner.task_id,
            "winner_dag": None if lost.winner is None else lost.winner.dag_id,
            "winner_run": None if lost.winner is None else lost.winner.run_id,
            "winning_commit": None if lost.winner is None else lost.winner.to_dict(),
            "seconds": lost.seconds,
            "action": lost.action.value,
            "outcome": "lost" if lost.is_conflict else "failed",
            "reason": _shown(lost.reason or lost.decision_reason),
            "error": _shown(lost.error) or None,
        }
        for lost in report.lost
    ]
    for loss in report.lease_lost:
        rows.append({"attempt": loss.attempt, "kind": "lease_lost", "winner": None, "winner_task": None,
                     "winner_dag": None, "winner_run": None, "winning_commit": None, "seconds": None,
                     "action": "reschedule", "outcome": "aborted", "reason": _shown(loss.reason), "error": None})
    return sorted(rows, key=lambda r: r["attempt"])


def _last_error(report: WriteReport) -> str | None:
    last = report.last_lost
    return None if last is None else (last.error or last.decision_reason or None)


def _bounded(attempts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The first ``ATTEMPTS_FIRST`` and last ``ATTEMPTS_LAST`` attempts, and how many lie between."""
    left_out = len(attempts) - ATTEMPTS_FIRST - ATTEMPTS_LAST
    if left_out <= 0:
        return attempts, 0
    return attempts[:ATTEMPTS_FIRST] + attempts[-ATTEMPTS_LAST:], left_out


def _is_conflict(attempt: Mapping[str, Any]) -> bool:
    return attempt["kind"] not in (None, "lease_lost", "not_a_conflict")


#: Airflow's end states of a try without a report, as the report's status would say them.
_STATUS_OF_STATE = {"failed": "failed", "upstream_failed": "failed", "up_for_retry": "failed",
                    "skipped": "skipped", "up_for_reschedule": "rescheduled"}


def write_row(ti: Any, report: WriteReport | str | None) -> dict[str, Any]:
    """The row of one try: ``ti`` is a task instance or one of its earlier tries (Airflow's
    ``TaskInstanceHistory``), ``report`` what that try reported (``read_report``)."""
    state = getattr(ti.state, "value", ti.state)
    row: dict[str, Any] = {
        "kind": "write",
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "task_id": ti.task_id,
        "map_index": ti.map_index,
        "try_number": ti.try_number,
        "state": None if state is None else str(state),
        "operator": ti.operator,
        "started_at": None if ti.start_date is None else ti.start_date.isoformat(),
        "ended_at": None if ti.end_date is None else ti.end_date.isoformat(),
        "at": _epoch(ti.end_date or ti.start_date),
        "report": isinstance(report, WriteReport),
        "malformed": _shown(report) if isinstance(report, str) else None,
        "lease": None,
    }
    if not isinstance(report, WriteReport):
        # No report to read: Airflow's own state says how the try ended (a killed task, or a try
        # from before every end published a report), so it still counts in the totals.
        row.update(table=None, table_key=None, operation=None, partitions=None, committed=None,
                   status=_STATUS_OF_STATE.get(str(state)), version=None, snapshot_id=None, attempts=None,
                   conflicts=[], wasted_seconds=None, fence=None, engine=None, rows=None, error=None,
                   reason=None, refused=False, grant_to_start_seconds=None, conflict_count=0,
                   failure_count=0, conflicts_left_out=0)
        return row
    attempts = _attempts(report)
    shown, left_out = _bounded(attempts)
    row.update(
        table=report.table,
        table_key=report.table_key,  # the store's key for the table when it is a location
        operation=report.operation,
        partitions=None if report.partitions is None else [dict(p) for p in report.partitions],
        committed=report.committed,
        status=report.status.value,
        version=report.version,
        snapshot_id=report.snapshot_id,
        attempts=report.attempts,
        conflicts=shown,
        # Lost attempts not in ``conflicts`` (they lie after its first ``ATTEMPTS_FIRST``).
        conflicts_left_out=left_out,
        conflict_count=sum(1 for a in attempts if _is_conflict(a)),
        # Attempts that failed without a conflict: failures, never counted as conflicts lost.
        failure_count=sum(1 for a in attempts if a["outcome"] == "failed"),
        wasted_seconds=round(report.wasted_seconds, 3),
        fence=report.fence,
        engine=report.engine,
        rows=report.rows,
        error=_shown(report.error),
        # Why the try did not commit, in the row itself (not only in the task log): the engine's
        # error, or what ended it before its first attempt (an invalid declaration, admission).
        reason=None if report.committed else _shown(report.error or _last_error(report)),
        refused=report.attempts == 0 and not report.committed,
        # How long the lease was held before the write's first attempt started (admission's cost).
        grant_to_start_seconds=report.grant_to_start_seconds,
    )
    return row


#: What a winning commit says about the commit itself, not about the Airflow try that made it.
_COMMIT_FIELDS = ("version", "operation", "timestamp", "snapshot_id", "others", "basis")


def commit_only(attempt: dict[str, Any]) -> None:
    """The winner's task is in a DAG this reader may not read: show its commit only (version,
    operation), neither in the winner's text nor in its fields nor in its tag."""
    commit = attempt.get("winning_commit") or {}
    kept = {k: commit.get(k) for k in _COMMIT_FIELDS if k in commit}
    where = (f"v{kept['version']}" if kept.get("version") is not None
             else f"snapshot {kept['snapshot_id']}" if kept.get("snapshot_id") is not None else "")
    text = " ".join(p for p in (where, str(kept.get("operation") or "")) if p)
    attempt.update(winner_task=None, winner_dag=None, winner_run=None, winning_commit=kept or None,
                   winner=text or None)


__all__ = ["ATTEMPTS_FIRST", "ATTEMPTS_LAST", "commit_only", "read_report", "write_row"]
