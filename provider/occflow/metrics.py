"""occflow's metrics, sent through Airflow's ``Stats`` (statsd, Datadog, OpenTelemetry, or none).

Every name carries the conflict kind and the table, so a plain statsd backend (which drops tags)
can still chart conflicts by kind and table; the same values go out as tags for backends that
keep them. Table names are made statsd-safe (``db.orders`` -> ``db__orders``, as Airflow does for
task ids in its legacy names).

=====================================  =======  ====================================================
name                                   type     one per
=====================================  =======  ====================================================
``occflow.conflicts.<kind>.<table>``   counter  lost attempt classified as a conflict
``occflow.retries.<kind>.<table>``     counter  retry decided by a policy (in the task or by Airflow)
``occflow.reschedules.<kind>.<table>`` counter  reschedule decided by a policy
``occflow.skips.<kind>.<table>``       counter  skip decided by a policy
``occflow.failures.<kind>.<table>``    counter  fail-fast decided by a policy
``occflow.wasted_seconds.<table>``     counter  seconds spent in attempts that were thrown away
``occflow.wasted.<table>``             timer    the same, as a distribution (one value per write)
``occflow.committed.<table>``          counter  committed write
``occflow.footprint_exceeded.<table>`` counter  committed write that touched more than it declared
=====================================  =======  ====================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .core.kinds import ConflictKind
from .core.policy import Action, Decision, parse_kind
from .core.report import WriteReport

PREFIX = "occflow"

# What each action counts as; DEFAULT (not a conflict) is Airflow's business, not ours.
_ACTION_METRIC: dict[Action, str] = {
    Action.RETRY: "retries",
    Action.RESCHEDULE: "reschedules",
    Action.SKIP: "skips",
    Action.FAIL: "failures",
}


def _stats() -> Any:
    # Imported late: occflow.core users (a Spark driver, the simulator) never need Airflow.
    from airflow.sdk.observability.stats import Stats

    return Stats


def stat_part(value: str) -> str:
    """A table name or kind as one statsd name segment."""
    from airflow.sdk.observability.stats import normalize_name_for_stats

    return normalize_name_for_stats(str(value).replace(".", "__"), log_warning=False)


def _tags(table: str, kind: ConflictKind | None, extra: Mapping[str, Any] | None) -> dict[str, str]:
    tags = {"table": str(table)}
    if kind is not None:
        tags["kind"] = kind.value
    for key, value in (extra or {}).items():
        if value is not None:
            tags[key] = str(value)
    return tags


def record_conflict(kind: ConflictKind | str, table: str, **tags: Any) -> None:
    """One lost attempt classified as ``kind`` on ``table``; ``not_a_conflict`` is not counted."""
    found = parse_kind(kind)
    if not found.is_conflict:
        return
    _stats().incr(f"{PREFIX}.conflicts.{found.value}.{stat_part(table)}", tags=_tags(table, found, tags))


def record_decision(decision: Decision, table: str, **tags: Any) -> None:
    """A policy's decision: counted as a retry, reschedule, skip or failure of its kind."""
    name = _ACTION_METRIC.get(decision.action)
    if name is None:
        return
    _stats().incr(
        f"{PREFIX}.{name}.{decision.kind.value}.{stat_part(table)}", tags=_tags(table, decision.kind, tags)
    )


def record_wasted(table: str, seconds: float, **tags: Any) -> None:
    """Seconds spent in attempts whose work was thrown away (a lost commit)."""
    if seconds <= 0:
        return
    stats = _stats()
    tagged = _tags(table, None, tags)
    stats.incr(f"{PREFIX}.wasted_seconds.{stat_part(table)}", count=max(1, round(seconds)), tags=tagged)
    stats.timing(f"{PREFIX}.wasted.{stat_part(table)}", timedelta(seconds=seconds), tags=tagged)


def record_committed(table: str, **tags: Any) -> None:
    _stats().incr(f"{PREFIX}.committed.{stat_part(table)}", tags=_tags(table, None, tags))


def record_footprint_exceeded(table: str, **tags: Any) -> None:
    """A committed write whose commit touched partitions (or read the table) beyond its
    declaration (``core.observed.excess``)."""
    _stats().incr(f"{PREFIX}.footprint_exceeded.{stat_part(table)}", tags=_tags(table, None, tags))


def record_report(report: WriteReport) -> None:
    """Everything in a write report: one conflict per lost attempt that lost a conflict, one
    decision per lost attempt, the wasted seconds, the commit, and ``footprint_exceeded``."""
    table = report.table
    tags = {"operation": report.operation, "profile": report.profile, "status": report.status.value}
    for lost in report.lost:
        record_conflict(lost.kind, table, **tags)
        decision = Decision(action=lost.action, delay_seconds=lost.delay_seconds, reason=lost.decision_reason,
                            kind=lost.kind, attempt=lost.attempt)
        record_decision(decision, table, **tags)
    record_wasted(table, report.wasted_seconds, **tags)
    if report.committed:
        record_committed(table, **tags)
    if report.footprint_exceeded:
        record_footprint_exceeded(table, **tags)


__all__ = [
    "PREFIX",
    "record_committed",
    "record_conflict",
    "record_decision",
    "record_footprint_exceeded",
    "record_report",
    "record_wasted",
    "stat_part",
]
